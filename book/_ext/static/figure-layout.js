// The layout side of the book's plotly figures, shared by the drawer (render-plotly.js) and
// the line after each figure that reserves its height before anything is drawn. Nothing
// here needs plotly.js: it reads a figure's JSON and returns the data and layout to draw.
//
// - stepFigure(figure, k): step k of a twin (attnlib.viz.twin), from layout.meta.twin and
//   the step's own relayout: its traces and its whole layout, without plotly's slider (the
//   page draws one control per parameter instead).
// - fit(figure, width): the figure laid out for the width it is drawn at. Titles and long
//   annotations are broken over lines; legends go outside the plotting area (below it on a
//   narrow screen); on a narrow screen, side-by-side subplots are stacked and axes get fewer
//   ticks. The height grows with the stacking; height(figure, width) is that height.
// - darken(figure, palette): the same figure in the page's dark colours.
// - reserve(script): sets the height of the box a figure is drawn into, before it is drawn,
//   so the text below never moves (no layout shift).
(function () {
  "use strict";

  // plotly.js's defaults for what a figure leaves unset.
  var DEFAULT_MARGIN = { l: 80, r: 80, t: 100, b: 80 };
  var DEFAULT_HEIGHT = 450;
  var DEFAULT_FONT = '"Open Sans", verdana, arial, sans-serif';
  // Below this width a figure is laid out for a narrow screen.
  var NARROW = 600;
  // A stacked subplot is at least this wide and this tall (px).
  var MIN_PANEL_WIDTH = 140;
  var MIN_PANEL_HEIGHT = 190;
  // Px between stacked subplots, room for a subplot title above and tick labels below.
  var STACK_GAP = 70;
  // Px of axis length each tick label needs, across and along the axis.
  var TICK_SPACING = { x: 80, y: 45 };
  var LINE_HEIGHT = 1.3;
  // The smallest tick label drawn (px): smaller ones are set at this size.
  var MIN_TICK_SIZE = 11;
  // A band at the top of every figure, above its title, where plotly's toolbar (the
  // modebar, about 26 px tall at the top right) is drawn: it never covers the title.
  var TOOLBAR_ROOM = 30;

  function clone(value) {
    return value === undefined ? undefined : JSON.parse(JSON.stringify(value));
  }

  function num(value, fallback) {
    return typeof value === "number" && isFinite(value) ? value : fallback;
  }

  // --- twin steps --------------------------------------------------------------------

  function twinMeta(figure) {
    var meta = figure.layout && figure.layout.meta;
    return meta && meta.twin ? meta.twin : null;
  }

  // Step k of a twin as a figure of its own: the traces it draws, each with its own
  // visibility, and its whole layout (the twin's, with the step's relayout applied).
  function stepFigure(figure, k) {
    var twin = twinMeta(figure);
    var layout = clone(figure.layout || {});
    delete layout.sliders;
    if (!twin) {
      return { data: figure.data || [], layout: layout };
    }
    var step = figure.layout.sliders[0].steps[k];
    var visible = step.args[0].visible;
    var span = twin.traces[k];
    var data = [];
    for (var j = span[0]; j < span[1]; j++) {
      data.push(Object.assign({}, figure.data[j], { visible: visible[j] }));
    }
    var update = step.args[1] || {};
    Object.keys(update).forEach(function (key) {
      if (update[key] === null) {
        delete layout[key];
      } else {
        layout[key] = clone(update[key]);
      }
    });
    var size = twin.size[k];
    if (size.height) {
      layout.height = size.height;
    } else {
      delete layout.height;
    }
    layout.margin = clone(size.margin || {});
    return { data: data, layout: layout };
  }

  // --- measuring text ------------------------------------------------------------------

  var canvas = null;

  function textWidth(text, size, family) {
    canvas = canvas || document.createElement("canvas");
    var context = canvas.getContext("2d");
    context.font = size + "px " + (family || DEFAULT_FONT);
    return context.measureText(text).width;
  }

  function plainText(html) {
    return String(html || "")
      .replace(/<[^>]+>/g, "")
      .replace(/&amp;/g, "&")
      .replace(/&lt;/g, "<")
      .replace(/&gt;/g, ">")
      .replace(/&#39;|&apos;/g, "'")
      .replace(/&quot;/g, '"');
  }

  // A line of plotly text (which may hold <b>, <i>, <sup> and <sub> spans) broken into
  // lines no wider than `width` px. A span that a break falls inside is closed before the
  // break and opened again after it, so every line renders on its own.
  function wrapLine(line, width, size, family) {
    // Tags (<b>, </sup>, <br>), words, a "<" that opens no tag, runs of spaces.
    var tokens = line.match(/<\/?[a-zA-Z][^<>]*>|[^<\s]+|<|\s+/g) || [];
    var lines = [];
    var current = "";
    var currentWidth = 0;
    var open = []; // the tags open at the current point
    var scale = function () {
      return open.some(function (tag) {
        return /^<su[pb]/i.test(tag);
      })
        ? 0.7
        : 1;
    };
    tokens.forEach(function (token) {
      if (/^<\/?[a-zA-Z]/.test(token)) {
        if (token.charAt(1) === "/") {
          open.pop();
        } else if (!/\/>$/.test(token)) {
          open.push(token);
        }
        current += token;
        return;
      }
      var isSpace = /^\s+$/.test(token);
      var w = textWidth(isSpace ? " " : plainText(token), size * scale(), family);
      if (!isSpace && currentWidth > 0 && currentWidth + w > width) {
        var closing = open
          .slice()
          .reverse()
          .map(function (tag) {
            return "</" + tag.match(/^<(\w+)/)[1] + ">";
          })
          .join("");
        lines.push(current.replace(/\s+$/, "") + closing);
        current = open.join("");
        currentWidth = 0;
      }
      if (isSpace && currentWidth === 0) {
        return;
      }
      current += isSpace ? " " : token;
      currentWidth += w;
    });
    lines.push(current);
    return lines;
  }

  // Plotly text broken to `width` px; returns the text and its number of lines.
  function wrap(text, width, size, family) {
    var lines = [];
    String(text || "")
      .split(/<br\s*\/?>/i)
      .forEach(function (line) {
        lines = lines.concat(wrapLine(line, width, size, family));
      });
    return { text: lines.join("<br>"), lines: lines.length };
  }

  // An axis title's font: plotly sets it 1.2 times the figure's font unless told.
  function axisTitleFont(layout, axis) {
    var f = fontOf(layout, axis.title);
    if (!(axis.title && axis.title.font && axis.title.font.size)) {
      f.size = Math.round(fontOf(layout, null).size * 1.2);
    }
    return f;
  }

  function fontOf(layout, part) {
    var base = (layout && layout.font) || {};
    var own = (part && part.font) || {};
    return {
      size: num(own.size, num(base.size, 12)),
      family: own.family || base.family || DEFAULT_FONT,
    };
  }

  // --- subplots -------------------------------------------------------------------------

  function axisKey(ref, letter) {
    var n = String(ref || letter).slice(1);
    return letter + "axis" + n;
  }

  // The subplots the visible traces draw on: their x and y axes and domains.
  function panels(data, layout) {
    var found = {};
    var list = [];
    data.forEach(function (trace) {
      if (trace.visible === false) {
        return;
      }
      var xk = axisKey(trace.xaxis, "x");
      var yk = axisKey(trace.yaxis, "y");
      var key = xk + "/" + yk;
      if (found[key]) {
        return;
      }
      var xa = layout[xk] || {};
      var ya = layout[yk] || {};
      found[key] = true;
      list.push({
        x: xk,
        y: yk,
        xd: (xa.domain || [0, 1]).slice(),
        yd: (ya.domain || [0, 1]).slice(),
        heatmap: false,
      });
    });
    data.forEach(function (trace) {
      if (trace.type === "heatmap") {
        list.forEach(function (p) {
          if (p.x === axisKey(trace.xaxis, "x") && p.y === axisKey(trace.yaxis, "y")) {
            p.heatmap = true;
          }
        });
      }
    });
    return list;
  }

  // Panels grouped into rows (top first), each row left to right.
  function rows(list) {
    var byTop = {};
    list.forEach(function (p) {
      var key = p.yd[1].toFixed(2) + ":" + p.yd[0].toFixed(2);
      (byTop[key] = byTop[key] || []).push(p);
    });
    return Object.keys(byTop)
      .map(function (key) {
        return byTop[key].sort(function (a, b) {
          return a.xd[0] - b.xd[0];
        });
      })
      .sort(function (a, b) {
        return b[0].yd[1] - a[0].yd[1];
      });
  }

  // Where a paper-referenced point belongs: the panel whose box (with room above for its
  // title) holds it, or null.
  function ownerPanel(list, x, y) {
    var best = null;
    list.forEach(function (p) {
      var inX = x >= p.xd[0] - 0.02 && x <= p.xd[1] + 0.02;
      var inY = y >= p.yd[0] - 0.12 && y <= p.yd[1] + 0.14;
      if (inX && inY && (!best || p.xd[1] - p.xd[0] < best.xd[1] - best.xd[0])) {
        best = p;
      }
    });
    return best;
  }

  // Maps a paper coordinate along one direction from an old panel span to its new one;
  // outside the span the distance in px is kept.
  function remap(value, oldSpan, newSpan, oldPx, newPx) {
    if (value > oldSpan[1]) {
      return newSpan[1] + ((value - oldSpan[1]) * oldPx) / newPx;
    }
    if (value < oldSpan[0]) {
      return newSpan[0] - ((oldSpan[0] - value) * oldPx) / newPx;
    }
    var f = (value - oldSpan[0]) / (oldSpan[1] - oldSpan[0] || 1);
    return newSpan[0] + f * (newSpan[1] - newSpan[0]);
  }

  // The px an annotation's text takes vertically.
  function textHeight(layout, annotation) {
    var lines = String(annotation.text || "").split(/<br\s*\/?>/i).length;
    return lines * fontOf(layout, annotation).size * LINE_HEIGHT + 4;
  }

  // The px above panel `p`'s top edge that the annotations owned by it take (its title).
  function titleRoom(layout, owners, p) {
    var room = 0;
    (layout.annotations || []).forEach(function (a, i) {
      if (owners[i] !== p || num(a.y, 0) < p.yd[1] - 0.01) {
        return;
      }
      var anchor = a.yanchor || "auto";
      var h = textHeight(layout, a);
      room = Math.max(room, anchor === "middle" ? h / 2 : anchor === "top" ? 0 : h);
    });
    return room;
  }

  // Side-by-side subplots, stacked `columns` to a row for a narrow screen. Moves the axes,
  // and the paper-referenced annotations and shapes that belong to a panel along with it;
  // returns the new plot height. Rows are kept apart by the room the upper row's x axes
  // need below them and the lower row's titles need above them.
  function stack(data, layout, list, owners, columns, plotWidth, plotHeight) {
    var order = [];
    rows(list).forEach(function (row) {
      order = order.concat(row);
    });
    var newRows = [];
    for (var i = 0; i < order.length; i += columns) {
      newRows.push(order.slice(i, i + columns));
    }
    var gapX = columns > 1 ? 24 : 0;
    var width = (plotWidth - gapX * (columns - 1)) / columns;
    var heights = newRows.map(function (row) {
      return Math.max.apply(
        null,
        row.map(function (p) {
          var own = (p.yd[1] - p.yd[0]) * plotHeight;
          var aspect = p.heatmap ? width : Math.max(width * 0.8, own * 0.7);
          return Math.max(MIN_PANEL_HEIGHT, Math.min(own, aspect));
        })
      );
    });
    var gaps = newRows.slice(1).map(function (row, r) {
      var above = bottomAxisRoom(layout, newRows[r], true);
      var titles = Math.max.apply(
        null,
        row.map(function (p) {
          return titleRoom(layout, owners, p);
        })
      );
      return above + titles + 14;
    });
    var total = heights.reduce(function (a, b) {
      return a + b;
    }, 0) + gaps.reduce(function (a, b) {
      return a + b;
    }, 0);
    var top = total;
    newRows.forEach(function (row, r) {
      row.forEach(function (p, c) {
        var x0 = (c * (width + gapX)) / plotWidth;
        p.nxd = [x0, Math.min(1, x0 + width / plotWidth)];
        p.nyd = [(top - heights[r]) / total, top / total];
        p.column = c;
      });
      top -= heights[r] + (gaps[r] || 0);
    });
    var first = order[0];
    order.forEach(function (p) {
      var xa = (layout[p.x] = layout[p.x] || {});
      var ya = (layout[p.y] = layout[p.y] || {});
      xa.domain = p.nxd;
      ya.domain = p.nyd;
      // A panel that lands in the first column shows the y tick labels its row's first
      // panel showed, when both label the same ticks.
      if (p.column === 0 && ya.showticklabels === false) {
        var lead = layout[first.y] || {};
        if (JSON.stringify(lead.ticktext) === JSON.stringify(ya.ticktext)) {
          ya.showticklabels = lead.showticklabels !== false;
        }
      }
    });
    var move = function (item, xKey, yKey, p) {
      var x = num(item[xKey], 0.5);
      var y = num(item[yKey], 0.5);
      if (p) {
        item[xKey] = remap(x, p.xd, p.nxd, plotWidth, plotWidth);
        item[yKey] = remap(y, p.yd, p.nyd, plotHeight, total);
      } else {
        item[yKey] = remap(y, [0, 1], [0, 1], plotHeight, total);
      }
    };
    (layout.annotations || []).forEach(function (a, i) {
      if (isPaper(a, "xref") && isPaper(a, "yref")) {
        move(a, "x", "y", owners[i]);
      }
    });
    (layout.shapes || []).forEach(function (s) {
      if (isPaper(s, "xref") && isPaper(s, "yref")) {
        var p = ownerPanel(list, num(s.x0, 0.5), num(s.y0, 0.5));
        move(s, "x0", "y0", p);
        move(s, "x1", "y1", p);
      }
    });
    list.forEach(function (p) {
      p.xd = p.nxd;
      p.yd = p.nyd;
    });
    return total;
  }

  function isPaper(item, key) {
    return (item[key] || "") === "paper";
  }

  // The categories a bar chart draws along panel p's x axis (strings), or null.
  function categories(data, p) {
    var cats = [];
    var bars = false;
    var other = false; // a trace of another kind on the same axes
    data.forEach(function (t) {
      if (t.visible === false || axisKey(t.xaxis, "x") !== p.x || axisKey(t.yaxis, "y") !== p.y) {
        return;
      }
      if (t.type !== "bar" || t.orientation === "h" || !Array.isArray(t.x)) {
        other = true;
        return;
      }
      bars = true;
      t.x.forEach(function (x) {
        if (typeof x === "string" && cats.indexOf(x) < 0) {
          cats.push(x);
        }
      });
    });
    return bars && !other && cats.length ? cats : null;
  }

  // The narrowest a heatmap panel can be: the width its cells' numbers need (at a size
  // still easy to read), or MIN_PANEL_WIDTH less a little for a heatmap without numbers.
  function heatmapMinWidth(data, layout, p) {
    var least = MIN_PANEL_WIDTH - 20;
    data.forEach(function (t) {
      if (t.type !== "heatmap" || axisKey(t.xaxis, "x") !== p.x || axisKey(t.yaxis, "y") !== p.y) {
        return;
      }
      if (!(t.texttemplate || t.text) || !Array.isArray(t.z) || !t.z.length) {
        return;
      }
      var longest = 0;
      (Array.isArray(t.text) ? t.text : t.z).forEach(function (row) {
        (Array.isArray(row) ? row : [row]).forEach(function (cell) {
          longest = Math.max(longest, textWidth(plainText(cell == null ? "" : cell), 10, DEFAULT_FONT));
        });
      });
      least = Math.max(least, t.z[0].length * (longest + 6));
    });
    return least;
  }

  // --- legend ---------------------------------------------------------------------------

  function legendNames(data, layout) {
    if (layout.showlegend === false) {
      return [];
    }
    var names = [];
    var shown = data.filter(function (t) {
      return t.visible !== false && t.showlegend !== false && t.name && !inLegendOnlyIfAsked(t);
    });
    if (layout.showlegend !== true && shown.length < 2) {
      return [];
    }
    shown.forEach(function (t) {
      var name = plainText(t.name);
      if (names.indexOf(name) < 0) {
        names.push(name);
      }
    });
    return names;
  }

  // Heatmaps appear in a legend only when a figure asks for it.
  function inLegendOnlyIfAsked(trace) {
    return trace.type === "heatmap" && trace.showlegend !== true;
  }

  // The rows a horizontal legend of `names` takes across `width` px.
  function legendRows(names, width, size, family) {
    var rowsUsed = 1;
    var used = 0;
    names.forEach(function (name) {
      var w = textWidth(name, size, family) + 46; // symbol, gap and padding
      if (used > 0 && used + w > width) {
        rowsUsed += 1;
        used = 0;
      }
      used += w;
    });
    return rowsUsed;
  }

  function insidePlot(legend) {
    var x = num(legend.x, 1.02);
    var y = num(legend.y, 1);
    return x >= 0 && x <= 1 && y >= 0 && y <= 1;
  }

  // The px the x axes of `list`'s panels need below their plotting area: tick labels and
  // title. With `all`, every panel counts, not only those at the bottom of the figure.
  function bottomAxisRoom(layout, list, all) {
    var room = 0;
    list.forEach(function (p) {
      if (!all && p.yd[0] > 0.01) {
        return;
      }
      var axis = layout[p.x] || {};
      if (axis.visible === false) {
        return;
      }
      var font = fontOf(layout, { font: axis.tickfont });
      var ticks = axis.showticklabels === false ? 0 : font.size * LINE_HEIGHT + 8;
      var angle = Math.abs(num(axis.tickangle, 0));
      if (angle === 90 || angle === 270) {
        var longest = 0;
        (axis.ticktext || []).forEach(function (t) {
          longest = Math.max(longest, textWidth(plainText(t), font.size, font.family));
        });
        ticks = longest + 10;
      }
      var title = 0;
      if (axis.title && axis.title.text) {
        var lines = String(axis.title.text).split(/<br\s*\/?>/i).length;
        title = lines * axisTitleFont(layout, axis).size * LINE_HEIGHT + 8;
      }
      room = Math.max(room, ticks + title);
    });
    return room;
  }

  // The px the y axes' labels written out in full (ticktext) and their titles need on
  // each side of the plot.
  function labelRoom(layout, list) {
    var room = { l: 0, r: 0 };
    list.forEach(function (p) {
      var axis = layout[p.y] || {};
      if (axis.visible === false || axis.showticklabels === false || !axis.ticktext) {
        return;
      }
      var f = fontOf(layout, { font: axis.tickfont });
      var longest = 0;
      axis.ticktext.forEach(function (t) {
        longest = Math.max(longest, textWidth(plainText(t), f.size, f.family));
      });
      var title = axis.title && axis.title.text ? axisTitleFont(layout, axis).size * LINE_HEIGHT + 6 : 0;
      var side = axis.side === "right" ? "r" : "l";
      room[side] = Math.max(room[side], Math.ceil(longest + 14 + title));
    });
    return room;
  }

  // The px an annotation at paper x (0..1 of the plot) may take across the figure.
  function roomAcross(a, x, margin, plotWidth, width) {
    var px = margin.l + x * plotWidth;
    var anchor = a.xanchor || "auto";
    if (anchor === "auto") {
      anchor = x < 0.33 ? "left" : x > 0.67 ? "right" : "center";
    }
    var left = px - 4;
    var right = width - px - 4;
    if (anchor === "left") {
      return right;
    }
    if (anchor === "right") {
      return left;
    }
    return 2 * Math.min(left, right);
  }

  // --- the whole fit ----------------------------------------------------------------------

  function fit(figure, width) {
    var data = (figure.data || []).map(function (t) {
      return Object.assign({}, t);
    });
    var layout = clone(figure.layout || {});
    var narrow = width < NARROW;
    var margin = Object.assign({}, DEFAULT_MARGIN, layout.margin || {});
    var height = num(layout.height, DEFAULT_HEIGHT);
    var baseFont = fontOf(layout, null);
    var list = panels(data, layout);
    if (narrow) {
      // A narrow figure keeps only the side margins its y axes' own labels need.
      var sides = labelRoom(layout, list);
      margin.l = Math.max(Math.min(margin.l, 56), sides.l);
      margin.r = Math.max(Math.min(margin.r, 20), sides.r);
    }
    var annotations = layout.annotations || [];
    // Which panel each annotation on the paper belongs to (a subplot's title, say).
    var owners = annotations.map(function (a) {
      return isPaper(a, "xref") && isPaper(a, "yref") ? ownerPanel(list, num(a.x, 0.5), num(a.y, 0.5)) : null;
    });
    var plotWidth = width - margin.l - margin.r;
    var plotHeight = height - margin.t - margin.b;

    // On a narrow screen, side-by-side subplots that would be too narrow are stacked: a
    // grid of heatmaps (panels of one kind) two or more to a row where they fit, anything
    // else one to a row. A colour bar then lies under the plot.
    var widest = 0;
    rows(list).forEach(function (row) {
      widest = Math.max(widest, row.length);
    });
    var narrowest = Math.min.apply(
      null,
      list
        .map(function (p) {
          return (p.xd[1] - p.xd[0]) * plotWidth;
        })
        .concat([Infinity])
    );
    var stacked = narrow && list.length > 0 && narrowest < MIN_PANEL_WIDTH * 1.6 &&
      (widest > 1 || narrowest < plotWidth * 0.9);
    var heatmapGrid = list.length > 0 && list.every(function (p) {
      return p.heatmap;
    });
    var columns = 1;
    if (stacked) {
      if (heatmapGrid) {
        var least = Math.max.apply(
          null,
          list.map(function (p) {
            return heatmapMinWidth(data, layout, p);
          })
        );
        columns = Math.max(1, Math.min(widest, Math.floor((plotWidth + 24) / (least + 24))));
      }
      var panelWidth = (plotWidth - 24 * (columns - 1)) / columns;
      annotations.forEach(function (a, i) {
        if (owners[i] && a.text) {
          var f = fontOf(layout, a);
          a.text = wrap(a.text, Math.min(panelWidth + 20, plotWidth + margin.r), f.size, f.family).text;
        }
      });
      var total = stack(data, layout, list, owners, columns, plotWidth, plotHeight);
      height += total - plotHeight;
      plotHeight = total;
    }

    // Every text on the paper is broken to the room it has across the figure.
    annotations.forEach(function (a, i) {
      if (!isPaper(a, "xref") || !a.text) {
        return;
      }
      var f = fontOf(layout, a);
      var room = roomAcross(a, num(a.x, 0.5), margin, plotWidth, width);
      var p = owners[i];
      if (p && !stacked) {
        room = Math.min(room, (p.xd[1] - p.xd[0]) * plotWidth + 40);
      }
      a.text = wrap(a.text, Math.max(60, room), f.size, f.family).text;
    });

    // Axis titles are broken to their axis's length.
    list.forEach(function (p) {
      [
        [p.x, (p.xd[1] - p.xd[0]) * plotWidth],
        [p.y, (p.yd[1] - p.yd[0]) * plotHeight],
      ].forEach(function (pair) {
        var axis = layout[pair[0]];
        if (axis && axis.title && axis.title.text) {
          var f = axisTitleFont(layout, axis);
          axis.title = Object.assign({}, axis.title, {
            text: wrap(axis.title.text, Math.max(60, pair[1]), f.size, f.family).text,
          });
        }
      });
    });

    // A colour bar on a narrow screen lies under the plot, across it.
    var bars = [];
    if (narrow) {
      data.forEach(function (t) {
        if (t.type === "heatmap" && t.showscale !== false && !t.coloraxis) {
          bars.push((t.colorbar = Object.assign({}, t.colorbar || {})));
        }
      });
      Object.keys(layout).forEach(function (key) {
        if (/^coloraxis\d*$/.test(key) && layout[key].showscale !== false) {
          layout[key] = Object.assign({}, layout[key]);
          bars.push((layout[key].colorbar = Object.assign({}, layout[key].colorbar || {})));
        }
      });
    }

    // The legend never sits on the plotting area; on a narrow screen it goes below it.
    var below = bottomAxisRoom(layout, list, false) + 10;
    var legend = (layout.legend = Object.assign({}, layout.legend || {}));
    var names = legendNames(data, layout);
    var bottom = below;
    if (names.length && (narrow || insidePlot(legend))) {
      var legendFont = fontOf(layout, legend);
      var lines = legendRows(names, width - 10, legendFont.size, legendFont.family);
      Object.assign(legend, {
        orientation: "h",
        x: Math.max(-margin.l + 4, -margin.l) / plotWidth,
        xanchor: "left",
        y: -bottom / plotHeight,
        yanchor: "top",
        bgcolor: "rgba(0,0,0,0)",
      });
      bottom += lines * (legendFont.size * LINE_HEIGHT + 8) + 10;
    }
    bars.forEach(function (bar, i) {
      var title = bar.title && bar.title.text;
      Object.assign(bar, {
        orientation: "h",
        x: 0,
        xanchor: "left",
        len: Math.min(1, 260 / plotWidth),
        lenmode: "fraction",
        thickness: 14,
        y: -(bottom + (title ? 22 : 0)) / plotHeight,
        yanchor: "top",
        yref: "paper",
      });
      if (title) {
        bar.title = Object.assign({}, bar.title, { side: "top" });
      }
      bottom += 14 + 26 + (title ? 22 : 0) + (i ? 6 : 0);
    });
    if (bottom > margin.b) {
      height += bottom - margin.b;
      margin.b = bottom;
    }

    // The title is broken over lines to the figure's width and stands at its top; the top
    // margin holds it and the titles of the top row of subplots.
    // In print (the PDF edition marks its page book-pdf) there is no toolbar.
    var band = typeof document !== "undefined" && document.documentElement.classList.contains("book-pdf") ? 0 : TOOLBAR_ROOM;
    var top = 10 + band;
    var titleShift = 8 + band;
    var title = layout.title;
    if (title && typeof title === "object" && title.text) {
      var titleFont = fontOf(layout, title);
      var titleSize = num(title.font && title.font.size, baseFont.size * 1.4);
      var anchor = title.xanchor || "auto";
      var x0 = num(title.x, 0.5) * width;
      var room = anchor === "left" || (anchor === "auto" && x0 < width / 3) ? width - x0 - 6 : width - 12;
      var wrapped = wrap(title.text, room, titleSize, titleFont.family);
      title.text = wrapped.text;
      top += wrapped.lines * titleSize * LINE_HEIGHT + 8;
      // plotly anchors the top of a title of several lines about 0.7 of a line higher
      // than that of a single line.
      if (wrapped.lines > 1) {
        titleShift += 0.7 * titleSize;
      }
    }
    var upper = 0;
    annotations.forEach(function (a) {
      if (!isPaper(a, "yref") || num(a.y, 0) < 0.99) {
        return;
      }
      var anchor = a.yanchor || "auto";
      var h = textHeight(layout, a);
      var over = (num(a.y, 1) - 1) * plotHeight + num(a.yshift, 0);
      upper = Math.max(upper, over + (anchor === "middle" ? h / 2 : anchor === "top" ? 0 : h));
    });
    top = Math.ceil(top + upper + 4);
    // The top margin is what the title and the top row's titles need: more when they need
    // it, less when the figure kept room for a title drawn in the middle of its margin
    // (unless a legend stands above the plot).
    var legendAbove = names.length && num(legend.y, 1) > 1 && legend.yanchor !== "top";
    if (top > margin.t || !legendAbove) {
      height += top - margin.t;
      margin.t = top;
    }
    if (title && typeof title === "object" && title.text) {
      Object.assign(title, { yref: "container", y: 1 - titleShift / height, yanchor: "top" });
    }

    // The categories of a bar chart's axis are all labelled, each label broken to the width
    // of its category (and set smaller when one word does not fit), never rotated.
    list.forEach(function (p) {
      var axis = layout[p.x];
      var cats = categories(data, p);
      if (!axis || !cats || axis.tickvals || axis.showticklabels === false) {
        return;
      }
      var f = fontOf(layout, { font: axis.tickfont });
      var each = ((p.xd[1] - p.xd[0]) * plotWidth) / cats.length - 8;
      var widestWord = 0;
      cats.forEach(function (c) {
        String(c)
          .split(/\s+/)
          .forEach(function (word) {
            widestWord = Math.max(widestWord, textWidth(word, f.size, f.family));
          });
      });
      var size = widestWord > each ? Math.max(MIN_TICK_SIZE, Math.floor((f.size * each) / widestWord)) : f.size;
      layout[p.x] = Object.assign({}, axis, {
        tickmode: "array",
        tickvals: cats,
        ticktext: cats.map(function (c) {
          return wrap(String(c), each, size, f.family).text;
        }),
        tickangle: 0,
        tickfont: Object.assign({}, axis.tickfont, { size: size }),
      });
    });

    // Tick labels stand a little off their axes, so that the first label of an x axis and
    // the last of a y axis do not meet at the corner.
    list.forEach(function (p) {
      [[p.x, 4], [p.y, 4]].forEach(function (pair) {
        var axis = layout[pair[0]];
        if (axis && axis.ticklabelstandoff === undefined) {
          layout[pair[0]] = Object.assign({}, axis, { ticklabelstandoff: pair[1] });
        }
      });
    });

    // The numbers written in heatmap cells are set small enough to fit their cells.
    data.forEach(function (t) {
      if (t.type !== "heatmap" || !(t.texttemplate || t.text) || !Array.isArray(t.z)) {
        return;
      }
      var p = list.filter(function (q) {
        return q.x === axisKey(t.xaxis, "x") && q.y === axisKey(t.yaxis, "y");
      })[0];
      var rowsCount = t.z.length;
      var cols = rowsCount ? t.z[0].length : 0;
      if (!p || !cols) {
        return;
      }
      var cellWidth = ((p.xd[1] - p.xd[0]) * plotWidth) / cols;
      var cellHeight = ((p.yd[1] - p.yd[0]) * plotHeight) / rowsCount;
      var f = fontOf(layout, { font: t.textfont });
      var longest = 0;
      (Array.isArray(t.text) ? t.text : t.z).forEach(function (row) {
        (Array.isArray(row) ? row : [row]).forEach(function (cell) {
          var label = t.texttemplate && !Array.isArray(t.text) ? String(cell) : String(cell == null ? "" : cell);
          longest = Math.max(longest, textWidth(plainText(label), f.size, f.family));
        });
      });
      var size = f.size;
      if (longest > cellWidth - 4) {
        size = Math.floor((f.size * (cellWidth - 4)) / longest);
      }
      size = Math.min(size, Math.floor(cellHeight / LINE_HEIGHT));
      if (size < f.size) {
        t.textfont = Object.assign({}, t.textfont, { size: Math.max(6, size) });
      }
    });

    // Tick labels are never smaller than MIN_TICK_SIZE.
    Object.keys(layout).forEach(function (key) {
      var axis = layout[key];
      if (!/^[xy]axis\d*$/.test(key) || !axis) {
        return;
      }
      var size = fontOf(layout, { font: axis.tickfont }).size;
      if (size < MIN_TICK_SIZE) {
        layout[key] = Object.assign({}, axis, {
          tickfont: Object.assign({}, axis.tickfont, { size: MIN_TICK_SIZE }),
        });
      }
    });

    // A log axis with automatic ticks labels whole numbers only: plotly labels the 2s and
    // 5s between powers of ten with a bare digit, in a smaller type ("100, 5, 2, 10"), so
    // such an axis gets ticks at the powers of ten when it spans three or more, and at
    // 1, 2 and 5 times them, written out ("50"), when it spans fewer.
    Object.keys(layout).forEach(function (key) {
      var m = key.match(/^([xy])axis(\d*)$/);
      var axis = layout[key];
      if (!m || !axis || axis.type !== "log" || axis.tickvals || axis.dtick !== undefined) {
        return;
      }
      var extent = logExtent(data, m[1], m[1] + m[2], axis);
      if (!extent) {
        return;
      }
      var decades = Math.log10(extent[1] / extent[0]);
      if (decades >= 2.5) {
        layout[key] = Object.assign({}, axis, { dtick: 1 });
        return;
      }
      var span = axis.domain || [0, 1];
      var most = Math.max(2, Math.floor(((span[1] - span[0]) * (m[1] === "x" ? plotWidth : plotHeight)) / TICK_SPACING[m[1]]));
      var values = [];
      // 1, 2 and 5 times each power of ten; 1 and 5 times, or the powers alone, when
      // the axis is too short for them all.
      [[1, 2, 5], [1, 5], [1, 3], [1]].some(function (digits) {
        values = [];
        for (var k = Math.floor(Math.log10(extent[0])) - 1; k <= Math.ceil(Math.log10(extent[1])); k++) {
          digits.forEach(function (d) {
            var v = Number((d * Math.pow(10, k)).toPrecision(3));
            if (v >= extent[0] / 1.02 && v <= extent[1] * 1.02) {
              values.push(v);
            }
          });
        }
        return values.length <= most;
      });
      if (values.length >= 2) {
        layout[key] = Object.assign({}, axis, {
          tickmode: "array",
          tickvals: values,
          ticktext: values.map(function (v) {
            return v.toLocaleString("en-US", { maximumSignificantDigits: 3 });
          }),
        });
      }
    });

    // Fewer ticks on a short axis (linear and log axes with automatic ticks).
    Object.keys(layout).forEach(function (key) {
      var m = key.match(/^([xy])axis\d*$/);
      var axis = layout[key];
      if (!m || !axis || axis.tickvals || axis.dtick !== undefined || axis.tickmode === "array") {
        return;
      }
      if (axis.type === "category") {
        return;
      }
      var span = axis.domain || [0, 1];
      var length = (span[1] - span[0]) * (m[1] === "x" ? plotWidth : plotHeight);
      var most = Math.max(2, Math.floor(length / TICK_SPACING[m[1]]));
      if (!axis.nticks || axis.nticks > most) {
        axis.nticks = most;
      }
    });

    layout.margin = margin;
    layout.height = Math.round(height);
    delete layout.width;
    layout.autosize = true;
    return { data: data, layout: layout };
  }

  // The positive data a log axis shows ([lowest, highest]), or its own range when it sets
  // one (in powers of ten); null when there is neither.
  function logExtent(data, letter, key, axis) {
    if (Array.isArray(axis.range) && axis.range.length === 2 && axis.autorange !== true) {
      return [Math.pow(10, Math.min(axis.range[0], axis.range[1])), Math.pow(10, Math.max(axis.range[0], axis.range[1]))];
    }
    var lo = Infinity;
    var hi = 0;
    var ref = key.replace("axis", "");
    data.forEach(function (t) {
      if (t.visible === false || (t[letter + "axis"] || letter) !== ref || !Array.isArray(t[letter])) {
        return;
      }
      t[letter].forEach(function (v) {
        if (typeof v === "number" && v > 0) {
          lo = Math.min(lo, v);
          hi = Math.max(hi, v);
        }
      });
    });
    return hi > 0 && lo < Infinity ? [lo, hi] : null;
  }

  function height(figure, width) {
    return fit(figure, width).layout.height;
  }

  // --- dark colours ---------------------------------------------------------------------

  function parseColor(color) {
    if (typeof color !== "string") {
      return null;
    }
    var c = color.trim().toLowerCase();
    var named = { white: "#ffffff", black: "#000000" };
    c = named[c] || c;
    var hex = c.match(/^#([0-9a-f]{3}|[0-9a-f]{6})$/);
    if (hex) {
      var h = hex[1].length === 3 ? hex[1].replace(/./g, "$&$&") : hex[1];
      return [parseInt(h.slice(0, 2), 16), parseInt(h.slice(2, 4), 16), parseInt(h.slice(4, 6), 16), 1];
    }
    var rgb = c.match(/^rgba?\(([^)]+)\)$/);
    if (rgb) {
      var parts = rgb[1].split(",").map(parseFloat);
      return [parts[0], parts[1], parts[2], parts.length > 3 ? parts[3] : 1];
    }
    return null;
  }

  function lightness(rgb) {
    return (0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]) / 255;
  }

  // Near-white backgrounds become the page's; near-black ink becomes the page's text
  // colour; the palette's colours stay.
  function darkColor(color, key, palette) {
    var rgb = parseColor(color);
    if (!rgb) {
      return color;
    }
    var l = lightness(rgb);
    if (/bgcolor$/.test(key)) {
      if (l > 0.85) {
        return rgb[3] < 1 ? "rgba(0,0,0,0)" : palette.background;
      }
      return color;
    }
    if (/(grid|line|zeroline|tick)color$/.test(key) && l > 0.8) {
      return palette.grid;
    }
    if (l < 0.25) {
      return palette.ink;
    }
    if (l > 0.9 && key === "color") {
      return palette.ink;
    }
    return color;
  }

  // A colour scale written out as [[stop, colour], ...] whose near-white end stands for
  // "nothing here" (an empty cell) gets the dark plot's own empty colour there; named
  // scales (Cividis, say) read the same on either background and stay.
  function darkScale(scale, palette) {
    if (!Array.isArray(scale)) {
      return scale;
    }
    return scale.map(function (stop) {
      var rgb = Array.isArray(stop) ? parseColor(stop[1]) : null;
      return rgb && lightness(rgb) > 0.85 ? [stop[0], palette.empty] : stop;
    });
  }

  function walk(value, key, palette) {
    if (Array.isArray(value)) {
      return value.map(function (v) {
        return walk(v, key, palette);
      });
    }
    if (value && typeof value === "object") {
      var out = {};
      Object.keys(value).forEach(function (k) {
        if (k === "z" || k === "x" || k === "y" || k === "customdata") {
          out[k] = value[k];
        } else if (k === "colorscale") {
          out[k] = darkScale(value[k], palette);
        } else {
          out[k] = walk(value[k], k, palette);
        }
      });
      return out;
    }
    if (typeof value === "string" && /color$/i.test(key)) {
      return darkColor(value, key, palette);
    }
    return value;
  }

  // The figure in dark colours: a dark template, and the figure's own near-black ink and
  // near-white boxes turned round. `palette`: {background, plot, ink, grid, empty}.
  function darken(figure, palette) {
    var layout = walk(figure.layout || {}, "", palette);
    var template = layout.template || {};
    var t = (template.layout = template.layout || {});
    t.paper_bgcolor = palette.background;
    t.plot_bgcolor = palette.plot;
    t.font = Object.assign({}, t.font, { color: palette.ink });
    ["xaxis", "yaxis"].forEach(function (axis) {
      t[axis] = Object.assign({}, t[axis], {
        gridcolor: palette.grid,
        linecolor: palette.grid,
        zerolinecolor: palette.grid,
      });
    });
    t.legend = Object.assign({}, t.legend, { bgcolor: "rgba(0,0,0,0)" });
    t.coloraxis = Object.assign({}, t.coloraxis, {
      colorbar: Object.assign({}, t.coloraxis && t.coloraxis.colorbar, { outlinewidth: 0 }),
    });
    layout.template = template;
    layout.paper_bgcolor = palette.background;
    layout.plot_bgcolor = palette.plot;
    layout.font = Object.assign({}, layout.font, { color: palette.ink });
    return { data: walk(figure.data || [], "", palette), layout: layout };
  }

  // --- reserving the box ------------------------------------------------------------------

  // The figure a page shows first: a twin's active step, or the figure itself.
  function firstFigure(figure) {
    var twin = twinMeta(figure);
    return twin ? stepFigure(figure, twin.active) : stepFigure(figure, 0);
  }

  // Runs right after a figure's JSON block, while the page is still being read.
  function reserve(script) {
    try {
      var holder = script.closest("figure");
      var block = holder && holder.querySelector('script[type="application/vnd.plotly.v1+json"]');
      var box = holder && holder.querySelector(".plotly-figure");
      if (!block || !box) {
        return;
      }
      var width = box.clientWidth;
      if (width > 0) {
        box.style.height = height(firstFigure(JSON.parse(block.textContent)), width) + "px";
      }
    } catch (error) {
      // The drawer reports errors; the box keeps the height the build gave it.
    }
  }

  window.BookFigures = {
    NARROW: NARROW,
    stepFigure: stepFigure,
    firstFigure: firstFigure,
    fit: fit,
    height: height,
    darken: darken,
    reserve: reserve,
    wrap: wrap,
    plainText: plainText,
    inLegend: function (trace) {
      return trace.visible !== false && trace.showlegend !== false && !inLegendOnlyIfAsked(trace);
    },
  };
})();
