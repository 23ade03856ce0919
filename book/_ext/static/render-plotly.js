// Draws the plotly figures that book/_ext/offline_site.py wrote into the page as JSON
// (<script type="application/vnd.plotly.v1+json"> inside <figure class="plotly-output">),
// with the plotly.js bundle served by the site and the layout rules of figure-layout.js:
// each figure is laid out for the width it is drawn at, and again when that width changes
// or when the page switches between light and dark.
//
// A twin (attnlib.viz.twin) gets one control per parameter, written into the page by the
// build: a range input for a numeric parameter, a group of buttons for any other. Moving
// one shows the precomputed figure of the chosen combination (its traces, subplots,
// titles and annotations) and updates the caption. A combination the twin does not hold
// (G must divide H, say) is never shown: the nearest one that exists is, the other
// controls follow, and a status line says what changed. Each drawing (the figure's first
// <svg>) gets role="img" and a label: the title of the step shown and the caption's words.
//
// plotly.js itself (most of a lesson's weight) is fetched only when a figure is about to be
// seen: when one comes within a screen's height of the window, when the page is printed,
// or when bookDrawFigures() asks for every figure (the PDF printer and the browser tests
// do). A reader who never scrolls to a figure never downloads it. The box of a figure not
// yet drawn already has its height (figure-layout.js), so drawing it moves nothing.
(function () {
  "use strict";

  var PLOTLY_MIME = "application/vnd.plotly.v1+json";
  var F = window.BookFigures;
  var entries = [];

  // The bundle's address: this script's data-bundle attribute, relative to this script.
  var own = document.currentScript;
  var bundleUrl = own && own.dataset.bundle ? new URL(own.dataset.bundle, own.src).href : null;
  var loading = null;

  function loadPlotly() {
    if (window.Plotly) {
      return Promise.resolve(window.Plotly);
    }
    if (!loading) {
      loading = new Promise(function (resolve, reject) {
        if (!bundleUrl) {
          reject(new Error("render-plotly.js has no data-bundle attribute naming plotly.js"));
          return;
        }
        var script = document.createElement("script");
        script.src = bundleUrl;
        script.onload = function () {
          resolve(window.Plotly);
        };
        script.onerror = function () {
          loading = null; // a later figure tries again
          reject(new Error("plotly.js did not load from " + bundleUrl));
        };
        document.head.appendChild(script);
      });
    }
    return loading;
  }

  // The page's colour mode; "auto" (before the theme has resolved it) follows the system.
  function isDark() {
    var theme = document.documentElement.dataset.theme;
    if (theme === "auto" || !theme) {
      return window.matchMedia("(prefers-color-scheme: dark)").matches;
    }
    return theme === "dark";
  }

  // The page's own colours (the theme's CSS variables), for figures drawn in dark mode.
  function palette() {
    var style = getComputedStyle(document.documentElement);
    var read = function (name, fallback) {
      return style.getPropertyValue(name).trim() || fallback;
    };
    return {
      background: read("--pst-color-background", "#121212"),
      plot: read("--pst-color-on-background", "#1e1e1e"),
      ink: read("--pst-color-text-base", "#ced6dd"),
      grid: read("--pst-color-border", "#48566b"),
      empty: read("--pst-color-surface", "#29313d"),
    };
  }

  // --- captions and labels ------------------------------------------------------------

  function titleOf(layout) {
    var title = layout && layout.title;
    var text = title && typeof title === "object" ? title.text : title;
    return F.plainText(String(text || "").replace(/<br\s*\/?>/gi, "; ")).replace(/\s+/g, " ").trim();
  }

  // What the figure shows, in words (as figure_caption in offline_site.py writes it).
  function shows(data, layout) {
    var axes = [];
    Object.keys(layout)
      .filter(function (key) {
        return /^[xy]axis\d*$/.test(key);
      })
      .sort()
      .forEach(function (key) {
        var axis = layout[key];
        var text = axis && axis.visible !== false && axis.title && axis.title.text;
        if (text) {
          var direction = key.charAt(0) === "x" ? "horizontal" : "vertical";
          var words = direction + " axis " + titleOf({ title: axis.title });
          // Subplots that share an axis title name it once.
          if (axes.indexOf(words) < 0) {
            axes.push(words);
          }
        }
      });
    var names = [];
    data.forEach(function (trace) {
      var name = F.plainText(trace.name || "").trim();
      if (name && F.inLegend(trace) && names.indexOf(name) < 0) {
        names.push(name);
      }
    });
    var out = [];
    if (axes.length) {
      var sentence = axes.join("; ");
      out.push(sentence.charAt(0).toUpperCase() + sentence.slice(1) + ".");
    }
    if (names.length) {
      out.push("Legend: " + names.slice(0, 8).join(", ") + (names.length > 8 ? ", ..." : "") + ".");
    }
    return out.join(" ");
  }

  function withStop(text) {
    return /[.?!]$/.test(text) ? text : text + ".";
  }

  // The first line of a figure's title (its headline), without the subtitle.
  function headlineOf(layout) {
    var title = layout && layout.title;
    var text = String((title && typeof title === "object" ? title.text : title) || "");
    return F.plainText(text.split(/<br\s*\/?>/i)[0]).replace(/\s+/g, " ").trim();
  }

  function updateCaption(entry, shown) {
    var title = headlineOf(shown.layout) || "plotly figure";
    var what = shows(shown.data, shown.layout);
    var text = entry.holder.querySelector(".plotly-caption-text");
    if (text) {
      var number = entry.holder.getAttribute("data-figure-number");
      text.textContent = (number ? "Figure " + number + ". " : "Figure: ") + withStop(title) + " ";
      var part = document.createElement("span");
      part.className = "plotly-caption-shows";
      part.textContent = what;
      text.appendChild(part);
    }
    entry.captionText = what;
    var printed = entry.holder.querySelector(".plotly-caption-print");
    if (printed && entry.twin) {
      var controls = entry.twin.params
        .filter(function (p) {
          return p.values.length > 1;
        })
        .map(function (p) {
          return p.label;
        });
      var over = controls.length > 1 ? "a control for each of " + controls.join(", ") : "a slider over " + controls[0];
      var where = entry.step === entry.twin.active ? "the default step, " : "";
      printed.textContent =
        "Interactive on the site, with " + over + "; printed here at " + where + describe(entry.twin, entry.twin.steps[entry.step]) + ".";
    }
  }

  // role="img" and a label on the drawing: the step's title and what the figure shows.
  function label(entry, shown) {
    var paper = entry.box.querySelector("svg.main-svg");
    if (paper) {
      var title = titleOf(shown.layout);
      paper.setAttribute("role", "img");
      paper.setAttribute(
        "aria-label",
        ((title ? "Figure" + (entry.holder.getAttribute("data-figure-number") ? " " + entry.holder.getAttribute("data-figure-number") + ". " : ": ") + title + ". " : "") + (entry.captionText || "")).trim() || "plotly figure"
      );
    }
  }

  // --- drawing -------------------------------------------------------------------------

  // How far the figure's texts reach past its box on each side (px, 0 when inside).
  function overflow(entry) {
    var box = entry.box.getBoundingClientRect();
    var out = { l: 0, r: 0, t: 0, b: 0 };
    entry.box.querySelectorAll("svg.main-svg text").forEach(function (text) {
      if (!text.textContent.trim() || text.closest(".hoverlayer")) {
        return;
      }
      var r = text.getBoundingClientRect();
      if (!r.width || !r.height) {
        return;
      }
      out.l = Math.max(out.l, box.left - r.left);
      out.r = Math.max(out.r, r.right - box.right);
      out.t = Math.max(out.t, box.top - r.top);
      out.b = Math.max(out.b, r.bottom - box.bottom);
    });
    return out;
  }

  function compose(entry) {
    var shown = F.stepFigure(entry.figure, entry.step);
    var width = entry.box.clientWidth || 600;
    var fitted = F.fit(shown, width);
    // What the last drawing of this step at this width showed: texts past the box push
    // the margins.
    var extra = entry.extra[width + ":" + entry.step] || null;
    if (extra) {
      var margin = fitted.layout.margin;
      margin.l += extra.l;
      margin.r += extra.r;
      margin.t += extra.t;
      margin.b += extra.b;
      fitted.layout.height += extra.t + extra.b;
    }
    if (isDark()) {
      var dark = F.darken(fitted, palette());
      dark.layout.height = fitted.layout.height;
      fitted = dark;
    }
    return { shown: shown, fitted: fitted };
  }

  // Draws the figure's current step at the box's width. Drawings of one figure run one
  // after the other: a control moved, the width changed and the colours switched while a
  // drawing is under way each wait for it, so two never mix in one chart.
  function draw(entry) {
    entry.started = true;
    entry.drawing = Promise.resolve(entry.drawing)
      .catch(function () {})
      .then(loadPlotly)
      .then(function () {
        return drawNow(entry);
      });
    return entry.drawing;
  }

  // The first drawing of a figure (later calls return the same promise).
  function start(entry) {
    if (!entry.first) {
      entry.first = draw(entry);
    }
    return entry.first;
  }

  function drawNow(entry) {
    var parts = compose(entry);
    entry.width = entry.box.clientWidth;
    entry.box.style.height = parts.fitted.layout.height + "px";
    if (entry.twin) {
      updateCaption(entry, parts.shown);
    } else if (entry.captionText === undefined) {
      entry.captionText = shows(parts.shown.data, parts.shown.layout);
    }
    // Between a narrow layout and a wide one a colour bar turns on its side, and plotly's
    // react leaves the old bar's labels behind: such a change draws the figure afresh.
    var narrow = entry.width < F.NARROW;
    var method = entry.narrow === undefined || entry.narrow === narrow ? "react" : "newPlot";
    entry.narrow = narrow;
    return window.Plotly[method](entry.box, parts.fitted.data, parts.fitted.layout, entry.config).then(
      function (gd) {
        label(entry, parts.shown);
        return settle(entry, gd);
      }
    );
  }

  // Texts that reach past the figure's box (a label at the end of a curve, tick labels
  // plotly rotated) widen the margin on that side, and the figure is drawn again; at most
  // twice, so a figure that cannot fit is still drawn.
  function settle(entry, gd) {
    var out = overflow(entry);
    if (Math.max(out.l, out.r, out.t, out.b) < 0.5) {
      return clearAnnotations(entry, gd);
    }
    var key = entry.box.clientWidth + ":" + entry.step;
    var over = Math.max(out.l, out.r, out.t, out.b);
    var extra = entry.extra[key] || { l: 0, r: 0, t: 0, b: 0, tries: 0 };
    if (over < 0.5 || extra.tries >= 2) {
      return gd;
    }
    ["l", "r", "t", "b"].forEach(function (side) {
      if (out[side] >= 0.5) {
        extra[side] += Math.ceil(out[side]) + 4;
      }
    });
    extra.tries += 1;
    entry.extra[key] = extra;
    return drawNow(entry);
  }

  // --- annotations off the data ----------------------------------------------------------

  // The data a drawing shows, as screen boxes: its markers, and points every 3 px along its
  // lines, each inside its subplot's plotting area.
  function dataMarks(gd) {
    var found = [];
    gd.querySelectorAll(".cartesianlayer .subplot").forEach(function (subplot) {
      var id = Array.prototype.filter.call(subplot.classList, function (c) {
        return /^x\d*y\d*$/.test(c);
      })[0];
      var drag = id && gd.querySelector(".draglayer ." + id + " rect.nsewdrag");
      if (!drag) {
        return;
      }
      var area = drag.getBoundingClientRect();
      var keep = function (r) {
        if (r.right >= area.left && r.left <= area.right && r.bottom >= area.top && r.top <= area.bottom) {
          found.push(r);
        }
      };
      subplot.querySelectorAll(".trace.scatter path.point").forEach(function (e) {
        keep(e.getBoundingClientRect());
      });
      subplot.querySelectorAll(".trace path.js-line").forEach(function (path) {
        var m = path.getScreenCTM();
        if (!m) {
          return;
        }
        var length = path.getTotalLength();
        for (var d = 0; d <= length; d += 3) {
          var q = path.getPointAtLength(d);
          var x = m.a * q.x + m.c * q.y + m.e;
          var y = m.b * q.x + m.d * q.y + m.f;
          keep({ left: x, right: x, top: y, bottom: y });
        }
      });
    });
    return found;
  }

  function meets(r, list, margin) {
    return list.some(function (k) {
      return k.right > r.left + margin && k.left < r.right - margin && k.bottom > r.top + margin && k.top < r.bottom - margin;
    });
  }

  // An annotation whose text lies over the data (a label on a reference line that a curve
  // crosses, say) moves off it: up or down by its own height, once or twice, to the first
  // place where it meets no data and no other text and stays inside the figure. An
  // annotation with an arrow keeps its place: its arrow points at the data on purpose.
  function clearAnnotations(entry, gd) {
    var notes = (gd.layout && gd.layout.annotations) || [];
    if (!notes.length || !window.Plotly) {
      return gd;
    }
    var marks = dataMarks(gd);
    if (!marks.length) {
      return gd;
    }
    var box = entry.box.getBoundingClientRect();
    var drawn = Array.prototype.slice.call(gd.querySelectorAll("g.annotation"));
    var texts = Array.prototype.map.call(gd.querySelectorAll("svg.main-svg text"), function (t) {
      return { el: t, r: t.getBoundingClientRect() };
    }).filter(function (t) {
      return t.r.width > 0 && t.el.textContent.trim();
    });
    var update = {};
    drawn.forEach(function (g) {
      var i = Number(g.getAttribute("data-index"));
      var note = notes[i];
      var text = g.querySelector("text");
      if (!note || !text || note.showarrow || note.visible === false) {
        return;
      }
      var r = text.getBoundingClientRect();
      if (!r.width || !meets(r, marks, 1)) {
        return;
      }
      var others = texts.filter(function (t) {
        return !g.contains(t.el);
      });
      var step = r.height + 2;
      [step, -step, 2 * step, -2 * step].some(function (dy) {
        var moved = { left: r.left, right: r.right, top: r.top - dy, bottom: r.bottom - dy };
        var inside = moved.top >= box.top && moved.bottom <= box.bottom;
        var clear = !meets(moved, marks, 1) && !meets(moved, others.map(function (t) {
          return t.r;
        }), 1);
        if (inside && clear) {
          update["annotations[" + i + "].yshift"] = (Number(note.yshift) || 0) + dy;
          return true;
        }
        return false;
      });
    });
    if (!Object.keys(update).length) {
      return gd;
    }
    return window.Plotly.relayout(gd, update).then(function () {
      return gd;
    });
  }

  // --- twin controls -------------------------------------------------------------------

  // The step that shows value `v` of parameter `i`: of those, the one whose other
  // parameters come closest to the values the reader last chose for them (`intent`).
  function bestStep(twin, intent, i, v) {
    var best = -1;
    var bestCost = Infinity;
    twin.steps.forEach(function (s, k) {
      if (s[i] !== v) {
        return;
      }
      var cost = 0;
      s.forEach(function (value, j) {
        if (j !== i) {
          cost += Math.abs(value - intent[j]);
        }
      });
      if (cost < bestCost) {
        best = k;
        bestCost = cost;
      }
    });
    return best;
  }

  // Whether value `v` of parameter `i` exists with the others where they are.
  function available(twin, current, i, v) {
    var at = twin.steps[current];
    return twin.steps.some(function (s) {
      return (
        s[i] === v &&
        s.every(function (value, j) {
          return j === i || value === at[j];
        })
      );
    });
  }

  function syncControls(entry) {
    var twin = entry.twin;
    var at = twin.steps[entry.step];
    entry.holder.querySelectorAll("[data-twin-param]").forEach(function (control) {
      var i = Number(control.getAttribute("data-twin-param"));
      var p = twin.params[i];
      if (control.tagName === "INPUT") {
        control.value = String(at[i]);
        control.setAttribute("aria-valuetext", p.label + " = " + p.text[at[i]]);
        var output = entry.holder.querySelector('output[for="' + control.id + '"]');
        if (output) {
          output.textContent = p.text[at[i]];
        }
      } else {
        var v = Number(control.getAttribute("data-twin-value"));
        control.setAttribute("aria-pressed", v === at[i] ? "true" : "false");
        var open = available(twin, entry.step, i, v);
        control.classList.toggle("twin-unavailable", !open);
        if (open) {
          control.removeAttribute("title");
        } else {
          control.setAttribute("title", "Not with the other settings shown; they change too.");
        }
      }
    });
  }

  // The reader set parameter `i` to value `v`. The twin shows the combination of `v` with
  // the values the reader chose for the other parameters when it holds it, else the
  // nearest one it holds; the other controls then show where they stand, and the status
  // line says which combination is missing. The reader's own choices are kept, so a
  // control passed through a value that forced another one away brings it back.
  function choose(entry, i, v) {
    var twin = entry.twin;
    entry.intent[i] = v;
    var k = bestStep(twin, entry.intent, i, v);
    if (k < 0) {
      syncControls(entry);
      return Promise.resolve();
    }
    var shown = twin.steps[k];
    var missing = shown.some(function (value, j) {
      return value !== entry.intent[j];
    });
    var status = entry.holder.querySelector(".twin-status");
    if (status) {
      status.textContent = missing
        ? "The figure has no step for " + describe(twin, entry.intent) + "; it shows " + describe(twin, shown) + "."
        : "";
    }
    var changed = k !== entry.step;
    entry.step = k;
    syncControls(entry);
    return changed ? draw(entry) : Promise.resolve();
  }

  // "H = 8, G = 3": values (indices) of the parameters that have a control.
  function describe(twin, at) {
    return twin.params
      .map(function (p, j) {
        return p.values.length > 1 ? p.label + " = " + p.text[at[j]] : null;
      })
      .filter(Boolean)
      .join(", ");
  }

  function wireControls(entry) {
    entry.holder.querySelectorAll("[data-twin-param]").forEach(function (control) {
      var i = Number(control.getAttribute("data-twin-param"));
      if (control.tagName === "INPUT") {
        control.addEventListener("input", function () {
          choose(entry, i, Number(control.value));
        });
      } else {
        control.addEventListener("click", function () {
          choose(entry, i, Number(control.getAttribute("data-twin-value")));
        });
      }
      control.disabled = false;
    });
    syncControls(entry);
  }

  // --- set-up ---------------------------------------------------------------------------

  var count = 0;

  function setUp(block) {
    var figure = JSON.parse(block.textContent);
    var holder = block.closest("figure") || block.parentNode;
    var box = holder.querySelector(".plotly-figure");
    if (!box) {
      box = document.createElement("div");
      box.className = "plotly-figure";
      block.parentNode.insertBefore(box, block);
    }
    count += 1;
    box.id = "plotly-figure-" + count;
    // No "share to Plotly Cloud" button: the site sends nothing to another host. The page
    // lays figures out again itself when their width changes, so plotly's own resizing
    // is off.
    var config = Object.assign({}, figure.config || {}, {
      responsive: false,
      showSendToCloud: false,
      displaylogo: false,
    });
    delete config.plotlyServerURL;
    var twin = figure.layout && figure.layout.meta && figure.layout.meta.twin;
    var entry = {
      figure: figure,
      holder: holder,
      box: box,
      config: config,
      twin: twin || null,
      step: twin ? twin.active : 0,
      // The value the reader chose for each parameter (a twin's steps may not hold them all).
      intent: twin ? twin.steps[twin.active].slice() : [],
      // Margins a drawing showed were short, by width and step (see settle).
      extra: {},
    };
    entries.push(entry);
    if (twin) {
      wireControls(entry);
    }
    return entry;
  }

  // Lays every figure drawn so far out again (after a change of width or of colour mode).
  function redrawAll() {
    return Promise.all(
      entries
        .filter(function (entry) {
          return entry.started;
        })
        .map(draw)
    );
  }

  // Draws every figure of the page; resolves once each has been drawn.
  function drawAll() {
    window.bookFiguresDrawn = Promise.all(entries.map(start));
    return window.bookFiguresDrawn;
  }

  // Draws each figure as it comes within a screen's height of the window.
  function drawWhenNear() {
    if (!window.IntersectionObserver) {
      drawAll();
      return;
    }
    var observer = new IntersectionObserver(
      function (seen) {
        seen.forEach(function (item) {
          if (item.isIntersecting) {
            observer.unobserve(item.target);
            start(entries[Number(item.target.dataset.entry)]);
          }
        });
      },
      { rootMargin: "100% 0px" }
    );
    entries.forEach(function (entry, i) {
      entry.box.dataset.entry = String(i);
      observer.observe(entry.box);
    });
  }

  function watch() {
    if (window.ResizeObserver) {
      var pending = null;
      var observer = new ResizeObserver(function () {
        // The PDF printer (print_pdf.py) lays the figures out for the printed column and
        // then sets bookFiguresFrozen: printing changes the page's width again, and a
        // drawing started then would be caught half done.
        if (pending || window.bookFiguresFrozen) {
          return;
        }
        pending = window.requestAnimationFrame(function () {
          pending = null;
          entries.forEach(function (entry) {
            if (entry.started && Math.abs(entry.box.clientWidth - entry.width) >= 1) {
              draw(entry);
            }
          });
        });
      });
      entries.forEach(function (entry) {
        observer.observe(entry.box);
      });
    }
    new MutationObserver(function () {
      redrawAll();
    }).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
  }

  function drawFigures() {
    var blocks = document.querySelectorAll('script[type="' + PLOTLY_MIME + '"]');
    Array.prototype.forEach.call(blocks, setUp);
    // The PDF printer (book/_ext/print_pdf.py) and the browser tests call this and wait for
    // what it returns (also kept as window.bookFiguresDrawn).
    window.bookDrawFigures = drawAll;
    window.bookRedrawFigures = redrawAll;
    // Resolves once every figure has finished its latest drawing.
    window.bookFiguresIdle = function () {
      var pending = entries.map(function (entry) {
        return entry.drawing;
      });
      return Promise.all(pending).then(function () {
        var later = entries.some(function (entry, i) {
          return entry.drawing !== pending[i];
        });
        return later ? window.bookFiguresIdle() : undefined;
      });
    };
    watch();
    drawWhenNear();
    // A printed page shows every figure.
    window.addEventListener("beforeprint", drawAll);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawFigures);
  } else {
    drawFigures();
  }
})();
