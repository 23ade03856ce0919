// Draws the plotly figures that book/_ext/offline_site.py wrote into the page as JSON
// (<script type="application/vnd.plotly.v1+json">), with the plotly.js served by the site.
(function () {
  "use strict";

  function drawFigures() {
    var blocks = document.querySelectorAll(
      'script[type="application/vnd.plotly.v1+json"]'
    );
    blocks.forEach(function (block) {
      var figure = JSON.parse(block.textContent);
      var config = Object.assign({ responsive: true }, figure.config || {});
      // plotlyServerURL only feeds the "edit in Chart Studio" link, which stays off.
      delete config.plotlyServerURL;
      var target = document.createElement("div");
      target.className = "plotly-figure";
      block.parentNode.insertBefore(target, block);
      window.Plotly.newPlot(target, {
        data: figure.data || [],
        layout: figure.layout || {},
        frames: figure.frames || [],
        config: config,
      });
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawFigures);
  } else {
    drawFigures();
  }
})();
