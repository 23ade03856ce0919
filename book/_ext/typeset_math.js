// Typesets the math of built HTML pages once, at build time, with MathJax (npm, run by
// Node), so that no page needs a math script:
//
//     node typeset_math.js NODE_MODULES FONTS_DIR PAGE.html ...
//
// Sphinx writes each formula as TeX: <span class="math ...">\(...\)</span> inline and
// <div class="math ...">\[...\]</div> on its own line. Each becomes MathJax's CommonHTML
// output (HTML and CSS, drawn with MathJax's web fonts) with its MathML beside it for
// screen readers (MathJax's assistive-mml), inside the same element. Each page gets the
// CSS of the characters it uses in a <style> of its own, with the fonts read from
// FONTS_DIR (the site's copy of MathJax's fonts) by a path relative to the page. A page
// without math is left as it is, and so is one typeset before (incremental builds).
//
// A formula MathJax cannot read stops the build: the page and the TeX are printed, and the
// exit status is 1.
"use strict";

const fs = require("fs");
const path = require("path");

const MATH = /(<(span|div) class="math notranslate nohighlight"[^>]*>)([\s\S]*?)(<\/\2>)/g;
// The TeX inside: \( ... \) or \[ ... \], possibly after an equation number's markup.
const TEX = /^([\s\S]*?)\\([([])([\s\S]*)\\([)\]])\s*$/;
const FONT_URL = "@@MATHJAX_FONTS@@";

function unescapeHtml(text) {
  return text
    .replace(/&lt;/g, "<")
    .replace(/&gt;/g, ">")
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&amp;/g, "&");
}

// MathJax's markup less what an HTML page does without: the MathML namespace (the HTML
// parser knows <math>), an old IE attribute, and the container's position, which the
// page's math CSS sets once for all (CONTAINER_CSS).
function slim(html) {
  return html
    .replace(' xmlns="http://www.w3.org/1998/Math/MathML"', "")
    .replace(' unselectable="on"', "")
    .replace(/^<mjx-container([^>]*) style="position: relative;"/, "<mjx-container$1");
}
const CONTAINER_CSS = 'mjx-container[jax="CHTML"]{position:relative}';

// CSS without its line breaks and indentation.
function compact(css) {
  return css.replace(/\n\s*/g, "").replace(/\s*([{};:,])\s*/g, "$1");
}

async function typesetPage(MathJax, file, fontsDir, problems) {
  const html = fs.readFileSync(file, "utf8");
  const found = [...html.matchAll(MATH)].filter((m) => TEX.test(m[3]));
  if (!found.length) {
    return false;
  }
  const adaptor = MathJax.startup.adaptor;
  MathJax.startup.output.clearCache();
  const pieces = [];
  let last = 0;
  for (const match of found) {
    const [whole, open, , inner, close] = match;
    const [, before, opening, tex] = inner.match(TEX);
    const display = opening === "[";
    const source = unescapeHtml(tex.trim());
    let output = "";
    try {
      const node = await MathJax.tex2chtmlPromise(source, { display });
      output = slim(adaptor.outerHTML(node));
      if (output.includes("<mjx-merror")) {
        problems.push(`${file}: ${source}\n  ${adaptor.textContent(node).slice(0, 200)}`);
      }
    } catch (error) {
      problems.push(`${file}: ${source}\n  ${error.message}`);
    }
    pieces.push(html.slice(last, match.index), open, before, output, close);
    last = match.index + whole.length;
  }
  pieces.push(html.slice(last));
  const fonts = path.relative(path.dirname(file), fontsDir).split(path.sep).join("/");
  const css = CONTAINER_CSS + compact(adaptor.textContent(MathJax.chtmlStylesheet())).split(FONT_URL).join(fonts);
  const page = pieces.join("").replace("</head>", `<style id="mathjax-chtml">${css}</style>\n</head>`);
  fs.writeFileSync(file, page);
  return true;
}

async function main() {
  const [nodeModules, fontsDir, ...files] = process.argv.slice(2);
  const MathJax = await require(path.join(nodeModules, "mathjax")).init({
    loader: {
      load: ["input/tex", "output/chtml", "a11y/assistive-mml"],
      paths: { mathjax: path.join(nodeModules, "mathjax", "es5") },
    },
    chtml: { fontURL: FONT_URL },
    startup: { typeset: false },
  });
  const problems = [];
  let typeset = 0;
  for (const file of files) {
    if (await typesetPage(MathJax, path.resolve(file), path.resolve(fontsDir), problems)) {
      typeset += 1;
    }
  }
  if (problems.length) {
    console.error(`MathJax could not typeset ${problems.length} formulas:\n${problems.join("\n")}`);
    process.exit(1);
  }
  console.log(`typeset_math: math typeset on ${typeset} of ${files.length} pages`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
