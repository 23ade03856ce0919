// The ipywidgets embedder typesets widget labels through MathJax 2's API,
// MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]); the book loads MathJax 3, which
// has no Hub. This bridge gives MathJax 3 that one call. The embedder draws widgets on the
// window "load" event; MathJax (a deferred script) is in place by DOMContentLoaded.
(function () {
  "use strict";

  function typeset(element) {
    var mathjax = window.MathJax;
    if (!element || !mathjax || !mathjax.startup || !mathjax.startup.promise) {
      return;
    }
    mathjax.startup.promise = mathjax.startup.promise.then(function () {
      return mathjax.typesetPromise([element]);
    });
  }

  function installBridge() {
    var mathjax = window.MathJax;
    if (!mathjax || mathjax.Hub) {
      return;
    }
    mathjax.Hub = {
      Queue: function () {
        Array.prototype.forEach.call(arguments, function (call) {
          if (Array.isArray(call) && call[0] === "Typeset") {
            typeset(call[2]);
          }
        });
      },
    };
  }

  document.addEventListener("DOMContentLoaded", installBridge);
})();
