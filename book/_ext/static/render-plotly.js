// Draws the plotly figures that book/_ext/offline_site.py wrote into the page as JSON
// (<script type="application/vnd.plotly.v1+json"> inside <figure class="plotly-output">),
// with the plotly.js bundle served by the site. Each drawing (the figure's first <svg>) gets
// role="img" and a label: the title of the step shown and the caption's words. A slider
// becomes a keyboard control (role="slider"): Tab to it, then the arrow keys, Home or End.
(function () {
  "use strict";

  var PLOTLY_MIME = "application/vnd.plotly.v1+json";
  var count = 0;

  function plainText(html) {
    var holder = document.createElement("div");
    holder.innerHTML = String(html || "").replace(/<br\s*\/?>/gi, "; ");
    return holder.textContent.replace(/\s+/g, " ").trim();
  }

  function titleOf(gd) {
    var title = gd.layout && gd.layout.title;
    return plainText(title && typeof title === "object" ? title.text : title);
  }

  function slider(gd) {
    var sliders = gd.layout && gd.layout.sliders;
    return sliders && sliders.length && sliders[0].steps && sliders[0].steps.length
      ? sliders[0]
      : null;
  }

  // The words a screen reader reads for the drawing: the figure's current title (it changes
  // with the slider's step) and the caption's description of what the figure shows.
  function label(gd, captionText) {
    var paper = gd.querySelector("svg.main-svg");
    if (paper) {
      var title = titleOf(gd);
      paper.setAttribute("role", "img");
      paper.setAttribute(
        "aria-label",
        ((title ? "Figure: " + title + ". " : "") + captionText).trim() || "plotly figure"
      );
    }
    var s = slider(gd);
    var rail = gd.querySelector("g.slider-container");
    if (s && rail) {
      var active = s.active || 0;
      var prefix = plainText((s.currentvalue || {}).prefix || "").replace(/[\s=:]+$/, "");
      rail.setAttribute("tabindex", "0");
      rail.setAttribute("role", "slider");
      rail.setAttribute("aria-label", prefix || "step");
      rail.setAttribute("aria-valuemin", "1");
      rail.setAttribute("aria-valuemax", String(s.steps.length));
      rail.setAttribute("aria-valuenow", String(active + 1));
      rail.setAttribute("aria-valuetext", plainText(s.steps[active].label));
    }
  }

  // Show step `index` of the figure's slider, as a click on that step would.
  function goToStep(gd, index) {
    var s = slider(gd);
    var steps = s.steps;
    index = Math.max(0, Math.min(steps.length - 1, index));
    if (index === (s.active || 0)) {
      return Promise.resolve();
    }
    var step = steps[index];
    // A step calls one of plotly's API methods on the figure, as plotly's own slider does.
    var method = API_METHODS.indexOf(step.method) >= 0 ? window.Plotly[step.method] : null;
    var done = method ? method.apply(null, [gd].concat(step.args || [])) : null;
    return Promise.resolve(done).then(function () {
      return window.Plotly.relayout(gd, { "sliders[0].active": index });
    });
  }

  var API_METHODS = ["update", "restyle", "relayout", "animate"];

  var KEYS = {
    ArrowLeft: -1,
    ArrowDown: -1,
    ArrowRight: 1,
    ArrowUp: 1,
    PageDown: -5,
    PageUp: 5,
  };

  // The slider (focused with Tab) answers the arrow keys, Page Up/Down, Home and End.
  function wireKeyboard(gd) {
    gd.addEventListener("keydown", function (event) {
      var s = slider(gd);
      if (!s || !event.target.closest || !event.target.closest("g.slider-container")) {
        return;
      }
      var active = s.active || 0;
      var target;
      if (event.key in KEYS) {
        target = active + KEYS[event.key];
      } else if (event.key === "Home") {
        target = 0;
      } else if (event.key === "End") {
        target = s.steps.length - 1;
      } else {
        return;
      }
      event.preventDefault();
      goToStep(gd, target);
    });
  }

  function drawFigure(block) {
    var figure = JSON.parse(block.textContent);
    // No "share to Plotly Cloud" button: the site sends nothing to another host.
    var config = Object.assign({ responsive: true }, figure.config || {}, {
      showSendToCloud: false,
    });
    delete config.plotlyServerURL;
    var holder = block.closest("figure") || block.parentNode;
    var caption = holder.querySelector(".plotly-caption-shows");
    var captionText = caption ? caption.textContent : "";
    // offline_site.py writes the box to draw into just before the JSON block.
    var target = block.previousElementSibling;
    if (!target || !target.classList.contains("plotly-figure")) {
      target = document.createElement("div");
      target.className = "plotly-figure";
      block.parentNode.insertBefore(target, block);
    }
    count += 1;
    target.id = "plotly-figure-" + count;
    return window.Plotly.newPlot(target, {
      data: figure.data || [],
      layout: figure.layout || {},
      frames: figure.frames || [],
      config: config,
    }).then(function (gd) {
      var update = function () {
        label(gd, captionText);
      };
      update();
      ["plotly_afterplot", "plotly_relayout", "plotly_update", "plotly_restyle",
        "plotly_sliderchange"]
        .forEach(function (name) {
          gd.on(name, update);
        });
      if (slider(gd)) {
        wireKeyboard(gd);
      }
      return gd;
    });
  }

  function drawFigures() {
    var blocks = document.querySelectorAll('script[type="' + PLOTLY_MIME + '"]');
    var drawn = Array.prototype.map.call(blocks, drawFigure);
    // The PDF printer (book/_ext/print_pdf.py) waits for this before printing.
    window.bookFiguresDrawn = Promise.all(drawn);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawFigures);
  } else {
    drawFigures();
  }
})();
