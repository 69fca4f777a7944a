/* The course's additions to sphinx-book-theme (listed in _config.yml: html_js_files).

   Figures: each figure (a matplotlib PNG) becomes a link to the image at full size, and is shown
   at least as large as its smallest text needs to read at 9.5 CSS pixels; on a phone, a figure
   that would otherwise shrink below that scrolls sideways inside its own box. The size of the
   smallest text is the one the chapter recorded in the PNG (attnbook.figures.style.record_figure_text,
   text chunk "attnbook:min-text-px", in pixels of the PNG).

   Scrolling boxes (wide formulas, theorem boxes) can be reached with the keyboard, and two
   accessibility defects of the theme's HTML are mended (accessibility(), below). */
(() => {
  "use strict";

  const SMALLEST_TEXT_CSS_PX = 9.5;
  const FIGURES = ".bd-content figure img, .bd-content div.cell_output img";

  /* The text chunks (tEXt) of a PNG, read from its bytes (the browser has the image cached). */
  async function pngText(url) {
    const response = await fetch(url);
    if (!response.ok) return {};
    const bytes = new DataView(await response.arrayBuffer());
    const text = {};
    const latin1 = new TextDecoder("latin1");
    for (let at = 8; at + 12 <= bytes.byteLength; ) {
      const length = bytes.getUint32(at);
      const type = latin1.decode(new Uint8Array(bytes.buffer, at + 4, 4));
      if (type === "tEXt") {
        const chunk = latin1.decode(new Uint8Array(bytes.buffer, at + 8, length));
        const split = chunk.indexOf("\0");
        text[chunk.slice(0, split)] = chunk.slice(split + 1);
      }
      if (type === "IEND") break;
      at += 12 + length;
    }
    return text;
  }

  /* Widen a figure whose smallest text would be drawn smaller than SMALLEST_TEXT_CSS_PX. */
  function sizeFigure(img) {
    const smallest = parseFloat(img.dataset.minTextPx || "");
    const box = img.parentElement;
    if (!(smallest > 0) || !img.naturalWidth || !box) return;
    const needed = Math.ceil((img.naturalWidth * SMALLEST_TEXT_CSS_PX) / smallest);
    if (needed > box.clientWidth) {
      img.style.width = `${needed}px`;
      img.style.maxWidth = "none";
      box.classList.add("attn-figure-scrolls");
    } else {
      img.style.width = "";
      img.style.maxWidth = "";
      box.classList.remove("attn-figure-scrolls");
    }
  }

  async function setUpFigure(img) {
    if (!img.closest("a")) {
      const link = document.createElement("a");
      link.href = img.currentSrc || img.src;
      link.className = "attn-figure-link";
      link.title = "Open the figure at full size";
      img.replaceWith(link);
      link.appendChild(img);
    }
    try {
      const text = await pngText(img.currentSrc || img.src);
      if (text["attnbook:min-text-px"]) img.dataset.minTextPx = text["attnbook:min-text-px"];
    } catch (error) {
      return; // e.g. opened from file://, where fetch is refused: the figure keeps the column's width
    }
    if (img.complete) sizeFigure(img);
    else img.addEventListener("load", () => sizeFigure(img), { once: true });
  }

  /* A box that scrolls sideways gets a tab stop, so that it scrolls with the arrow keys, and the
     class attn-scrolls (a formula then fades out at its right edge: attnbook.css). */
  function tabStops() {
    const boxes = ".bd-content div.admonition, .bd-content span.math, .bd-content div.math";
    document.querySelectorAll(boxes).forEach((box) => {
      const scrolls = box.scrollWidth > box.clientWidth + 1 && getComputedStyle(box).overflowX !== "visible";
      box.classList.toggle("attn-scrolls", scrolls);
      if (scrolls && !box.querySelector("a, button, [tabindex]")) box.tabIndex = 0;
      else if (box.getAttribute("tabindex") === "0" && !scrolls) box.removeAttribute("tabindex");
    });
  }

  let pending = null;
  let layouts = 0;
  function relayout() {
    clearTimeout(pending);
    pending = setTimeout(() => {
      document.querySelectorAll(FIGURES).forEach(sizeFigure);
      tabStops();
      layouts += 1;
      document.documentElement.dataset.attnLayouts = String(layouts); // the browser tests wait for it
    }, 150);
  }

  /* Two defects of the theme's HTML that axe-core reports. The course title and the search button
     at the top of the left sidebar lie outside every landmark ("region"): the sidebar is the
     course's navigation, a complementary landmark. docutils marks each bibliography entry with
     the deprecated role doc-biblioentry inside a role="list", which then has no list items
     ("aria-required-children", critical): each entry is a list item. */
  function accessibility() {
    const sidebar = document.getElementById("pst-primary-sidebar");
    if (sidebar && !sidebar.hasAttribute("role")) {
      sidebar.setAttribute("role", "complementary");
      sidebar.setAttribute("aria-label", "Course contents");
    }
    document.querySelectorAll('[role="list"] > [role="doc-biblioentry"]').forEach((entry) => {
      entry.setAttribute("role", "listitem");
    });
  }

  function start() {
    accessibility();
    const figures = [...document.querySelectorAll(FIGURES)];
    Promise.all(figures.map(setUpFigure)).finally(() => {
      document.documentElement.dataset.attnFigures = "ready"; // the browser tests wait for it
    });
    window.addEventListener("resize", relayout);
    const math = window.MathJax?.startup?.promise;
    if (math) math.then(tabStops);
    else tabStops();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
