// The book's search results (Sphinx's search page; _config.yml names this file as
// html_search_scorer, which Sphinx writes into language_data.js, read right after
// searchtools.js and only by the search page).
//
// - Ranking: a page whose own title holds a word of the query ranks above pages and API
//   entries that only mention it ("rotary" finds the RoPE lesson before the API reference,
//   which has a section on attnlib.rope); otherwise Sphinx's own scores stand.
// - Snippets: Sphinx takes a result's snippet from the page's [role=main] element, which in
//   this theme starts with the article's toolbar (download and launch buttons); the
//   snippet is taken from the article itself instead.
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
    // Typeset math reads as the symbols of its MathML, one after the other.
    article.querySelectorAll("mjx-container").forEach(function (math) {
      var symbols = Array.prototype.map.call(math.querySelectorAll("mi, mn, mo, mtext"), function (el) {
        return el.textContent;
      });
      math.replaceWith(page.createTextNode(symbols.join(" ")));
    });
    var part = anchor ? article.querySelector(anchor) : null;
    return (part || article).textContent;
  };
})();
