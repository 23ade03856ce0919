// The book's search results (Sphinx's search page; _config.yml names this file as
// html_search_scorer, which Sphinx writes into language_data.js, read right after
// searchtools.js and only by the search page).
//
// - Ranking: a page whose own title holds a word of the query ranks above pages and API
//   entries that only mention it ("rotary" finds the RoPE lesson before the API reference,
//   which has a section on attnlib.core.rope); otherwise Sphinx's own scores stand.
// - Snippets: Sphinx takes a result's snippet from the page's [role=main] element, which in
//   this theme starts with the article's toolbar (download and launch buttons); the
//   snippet is taken from the article itself instead. Sphinx looks for the stemmed terms
//   ("rotari") in the text, finds none and quotes the start of the page; the snippet is
//   cut around the first place the reader's own words (or a word starting with a stem)
//   occur. Typeset math reads as a line of text ("d_head = d_model / H"), from its MathML.
/* global Search */
var Scorer = {
  // Sphinx's defaults (searchtools.js).
  objNameMatch: 11,
  objPartialMatch: 6,
  objPrio: { 0: 15, 1: 5, 2: -5 },
  objPrioDefault: 0,
  title: 15,
  partialTitle: 7,
  term: 5,
  partialTerm: 2,
  // What a result gains when its page's title holds a word of the query: more than a
  // glossary or index entry of the word scores (up to 100).
  pageTitleBonus: 100,
  score: function (result) {
    // A result with a description is an API object (its "title" is its name), not a page.
    if (result[3]) {
      return result[4];
    }
    var title = String(result[1] || "").split(" > ")[0].toLowerCase();
    var anchor = result[2];
    var words = (new URLSearchParams(window.location.search).get("q") || "")
      .toLowerCase()
      .split(/\s+/)
      .filter(function (word) {
        return word.length > 2;
      });
    var own = words.some(function (word) {
      return new RegExp("(^|[^a-z0-9])" + word.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).test(title);
    });
    // The page itself (no anchor) rather than one of its sections.
    return result[4] + (own ? Scorer.pageTitleBonus + (anchor ? 0 : 1) : 0);
  },
};

(function () {
  if (typeof Search === "undefined") {
    return;
  }
  var original = Search.htmlToText;
  Search.htmlToText = function (htmlString, anchor) {
    var page = new DOMParser().parseFromString(htmlString, "text/html");
    var article = page.querySelector("article.bd-article");
    if (!article) {
      return original(htmlString, anchor);
    }
    article.querySelectorAll(".headerlink, script, style, .plotly-caption-screen").forEach(function (el) {
      el.remove();
    });
    article.querySelectorAll("mjx-container").forEach(function (math) {
      var mml = math.querySelector("mjx-assistive-mml math, math");
      var text = mml ? mathText(mml) : math.textContent;
      math.replaceWith(page.createTextNode(" " + text.replace(/\s+/g, " ").trim() + " "));
    });
    var part = anchor ? article.querySelector(anchor) : null;
    return (part || article).textContent.replace(/\s+/g, " ");
  };

  // MathML as a line of text: subscripts after "_", powers after "^", fractions with "/",
  // operators spaced, identifiers side by side kept apart by a space.
  var SPACED = /^[=<>+\u2212\u00d7\u00b7\u2264\u2265\u2248\u2260\u2208\u2192\u21a6,:;|]$/;
  function group(text) {
    return /^[\w.]+$/.test(text) ? text : "(" + text + ")";
  }
  // `tight`: inside a subscript or a power, where identifiers stand side by side ("head").
  function mathText(el, tight) {
    var kids = Array.prototype.slice.call(el.children);
    var tag = el.tagName.toLowerCase();
    var script = function (kid) {
      return group(mathText(kid, true).trim());
    };
    if (tag === "mi" || tag === "mn" || tag === "mtext") {
      return el.textContent.trim();
    }
    if (tag === "mo") {
      var op = el.textContent.trim();
      if (/^[\u2061-\u2064]?$/.test(op)) {
        return tight ? "" : " "; // an invisible operator (a product, say)
      }
      return SPACED.test(op) && !tight ? " " + op + " " : op;
    }
    if (tag === "msub" || tag === "munder") {
      return mathText(kids[0], tight) + "_" + script(kids[1]);
    }
    if (tag === "msup" || tag === "mover") {
      return mathText(kids[0], tight) + "^" + script(kids[1]);
    }
    if (tag === "msubsup" || tag === "munderover") {
      return mathText(kids[0], tight) + "_" + script(kids[1]) + "^" + script(kids[2]);
    }
    if (tag === "mfrac") {
      return group(mathText(kids[0], tight).trim()) + " / " + group(mathText(kids[1], tight).trim());
    }
    if (tag === "msqrt") {
      return "\u221a" + group(kids.map(function (kid) {
        return mathText(kid, tight);
      }).join("").trim());
    }
    if (tag === "annotation" || tag === "annotation-xml") {
      return "";
    }
    var out = "";
    var last = "";
    var items = /^(mi|mn|msub|msup|msubsup)$/;
    kids.forEach(function (kid) {
      var text = mathText(kid, tight);
      var name = kid.tagName.toLowerCase();
      // Two identifiers or numbers in a row (2 N L G) are kept apart, but for the letters
      // of a word in a subscript.
      if (!tight && out && items.test(name) && items.test(last) && !/\s$/.test(out)) {
        out += " ";
      }
      out += text;
      last = name;
    });
    if (tag === "mtr") {
      return out + "; ";
    }
    return out.replace(/\s+/g, " ");
  }

  // The snippet: about 240 characters of the text, around the first place a word of the
  // query occurs (the word itself, or a word that starts with its stem).
  Search.makeSearchSummary = function (htmlText, keywords, anchor) {
    var text = Search.htmlToText(htmlText, anchor).trim();
    if (text === "") {
      return null;
    }
    var lower = text.toLowerCase();
    var words = (new URLSearchParams(window.location.search).get("q") || "")
      .toLowerCase()
      .split(/\s+/)
      .filter(Boolean);
    var at = -1;
    words.concat(Array.from(keywords || [])).some(function (word) {
      var i = lower.indexOf(String(word).toLowerCase());
      if (i > -1) {
        at = i;
        return true;
      }
      return false;
    });
    var start = at > 120 ? text.lastIndexOf(" ", at - 100) + 1 : 0;
    var end = Math.min(text.length, start + 240);
    var summary = document.createElement("p");
    summary.classList.add("context");
    summary.textContent = (start > 0 ? "..." : "") + text.substring(start, end).trim() + (end < text.length ? "..." : "");
    return summary;
  };
})();
