"""The built website, opened offline in headless Chromium (Playwright driving Debian's chromium-headless-shell).

For every page of the table of contents: math is typeset by the bundled MathJax, every image
loads, the previous/next links lead to the neighbouring pages, nothing is fetched from outside
localhost and the console shows no errors. Each page is loaded once (a load costs seconds of CPU:
the theme's icons and MathJax) and checked in light and dark mode at phone width (390 x 844) and
on a desktop screen (1280 x 800), switching width and mode in that load: everywhere nothing is cut
off without a scroll bar (formulas, theorem boxes, proofs, tables, solutions opened from the
keyboard), the page does not scroll sideways and axe-core finds no critical or serious
accessibility violation; at phone width figures open at full size and their smallest text is
legible, and solutions start folded; in dark mode the background is dark and figures sit on
white. No caption
or figure label shows raw TeX. The search page must find a term. Screenshots are saved under
``_build/screenshots/``.

The site is built strictly into ``_build/html`` by :func:`test_book_builds_strictly`, after every
chapter has run (the build reuses their outputs: see :func:`built_site`), or is the one named by the
environment variable ``ATTNBOOK_SITE`` (screenshots then go beside it), tested as it is. Without Chromium or Playwright the test is skipped with a message saying how to get
them (CI installs both, so there it always runs).
"""

from __future__ import annotations

import filecmp
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from ..paths import ROOT  # noqa: E402
from ..units import by_unit, unit, unit_of

# the built site to test: ATTNBOOK_SITE=/tmp/jb-me/_build/html points it at a build elsewhere
SITE = Path(os.environ.get("ATTNBOOK_SITE", ROOT / "_build" / "html")).resolve()
SHOTS = SITE.parent / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> str | None:
    """The Chromium to drive: ``$CHROMIUM``, else Debian's headless shell (``make system``: the same
    engine without the desktop browser, about a tenth less CPU), else the full browser."""
    for candidate in (
        os.environ.get("CHROMIUM"),
        shutil.which("chromium-headless-shell"),
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


CHROMIUM_MISSING = (
    "Chromium is not installed: `make system` (Debian: apt-get install chromium-headless-shell) to run the browser test"
)


def toc_pages() -> list[str]:
    """Page names (e.g. 'book/00_notation') in reading order, from _toc.yml."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [chapter["file"] for chapter in part["chapters"]]
    return pages


PAGES = toc_pages()


#: the unit of work that builds the site (test_book_builds_strictly) with pytest-xdist
BUILDER = "book: build"


@pytest.fixture(scope="session")
def built_site(request) -> Path:
    """The site, built strictly (``jupyter-book build -W -n --keep-going``: any warning fails).

    It is built after every chapter has run, so the build reuses the outputs nbval stored in its
    execution cache (tests/plugins/chapters.py) and no chapter executes twice: without workers the
    chapters come first in the run; with pytest-xdist (``make test``) the scheduler hands the unit
    that builds the site (:data:`BUILDER`) out only when every chapter has finished, and the other
    tests of the site only when that unit has finished (tests/plugins/units.py). A worker that did not
    build the site reads the build's outcome, which the builder wrote for this run
    (``_build/.site-built-<run id>``). With ``ATTNBOOK_SITE`` set, that site is tested as it is.
    """
    if "ATTNBOOK_SITE" in os.environ:
        if not (SITE / "index.html").exists():
            pytest.fail(f"ATTNBOOK_SITE={SITE} holds no built site (index.html)")
        return SITE
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    outcome = ROOT / "_build" / f".site-built-{run}"
    if run and outcome.exists():
        failure = outcome.read_text(encoding="utf-8")
    elif run and not any(unit_of(item.nodeid) == BUILDER for item in request.session.items):
        pytest.fail("with pytest-xdist, the site is built by test_book_builds_strictly: select it too")
    else:
        failure = _build_strictly()
        if run:
            for old in (ROOT / "_build").glob(".site-built-*"):
                old.unlink()
            outcome.parent.mkdir(exist_ok=True)
            outcome.write_text(failure, encoding="utf-8")
    if failure:
        pytest.fail(failure)
    return SITE


#: the site's own stylesheet, script and icon (_config.yml: html_static_path)
STATIC = ROOT / "book" / "_static"


def stale_static_files() -> list[str]:
    """The files of book/_static whose copy in the built site differs from them (Sphinx copies them
    only when it writes a page; book/_ext/navigation_refresh.py has every page written when one
    changed)."""
    return [
        str(source.relative_to(STATIC))
        for source in sorted(STATIC.rglob("*"))
        if source.is_file()
        and not (
            (built := SITE / "_static" / source.relative_to(STATIC)).is_file()
            and filecmp.cmp(source, built, shallow=False)
        )
    ]


def _build_strictly() -> str:
    """Build the site strictly; '' when it built, else the build's warnings and errors."""
    build = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", "-W", "-n", "--keep-going", str(ROOT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if build.returncode != 0:
        log = build.stdout + build.stderr
        problems = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line or "Error" in line]
        return "the strict book build failed:\n" + "\n".join(problems[:40] or log.splitlines()[-40:])
    executed = [line for line in build.stdout.splitlines() if "Executing" in line and "Executing notebook" in line]
    print(f"book built; chapters executed by the build (not found in the cache): {len(executed)}")
    return ""


@unit("book: build")  # BUILDER
def test_book_builds_strictly(built_site):
    assert (built_site / "index.html").exists()
    if "ATTNBOOK_SITE" not in os.environ:  # the site tested is the one book/_static makes today
        assert stale_static_files() == [], "the built site's copies of book/_static differ from them"


@pytest.fixture(scope="module")
def site_url(built_site):
    executable = _chromium()
    if executable is None:
        pytest.skip(CHROMIUM_MISSING)
    try:
        import playwright  # noqa: F401
    except ImportError:
        pytest.skip("Playwright is not installed: `pip install -e '.[test]'`")
    handler = functools.partial(QuietHandler, directory=str(built_site))
    server = QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # the browser hangs up on a response it no longer wants when the test navigates away
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def browser(site_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class PageLog:
    """Console errors, page errors, failed requests and requests that left localhost."""

    def __init__(self, page, site_url):
        self.problems: list[str] = []
        host = urlparse(site_url).netloc

        def route(r):
            if urlparse(r.request.url).netloc != host and not r.request.url.startswith("data:"):
                self.problems.append(f"request outside localhost: {r.request.url}")
                return r.abort()
            return r.continue_()

        page.route("**/*", route)
        page.on("console", lambda m: m.type == "error" and self.problems.append(f"console error: {m.text}"))
        page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        # a request cut short because the test navigated away (net::ERR_ABORTED) is not a failure
        page.on(
            "requestfailed",
            lambda r: (
                "ERR_ABORTED" not in (r.failure or "")
                and self.problems.append(f"failed request: {r.url} ({r.failure})")
            ),
        )
        page.on("response", lambda r: r.status >= 400 and self.problems.append(f"HTTP {r.status}: {r.url}"))


def open_page(browser, site_url, name, query="", **context_options):
    context = browser.new_context(**context_options)
    page = context.new_page()
    log = PageLog(page, site_url)
    page.goto(f"{site_url}/{name}.html{query}", wait_until="load")
    has_math = page.evaluate("document.querySelectorAll('.math').length") > 0
    if has_math:
        page.wait_for_function(
            "() => [...document.querySelectorAll('.math')].every(e => e.querySelector('mjx-container'))",
            timeout=30_000,
        )
    page.wait_for_function("() => [...document.images].every(i => i.complete)", timeout=30_000)
    if page.evaluate("!!document.querySelector('script[src*=\"attnbook.js\"]')"):  # figures sized (book/_static)
        page.wait_for_function("() => document.documentElement.dataset.attnFigures === 'ready'", timeout=30_000)
    return context, page, log, has_math


#: every transition or animation that ends has ended (one that never ends, a spinner, is left out)
TRANSITIONS_ENDED_JS = """() => document.getAnimations().every(
  (a) => a.playState !== 'running' || a.effect?.getComputedTiming().endTime === Infinity)"""


def resize(page, viewport: dict) -> None:
    """Give the page another size, and wait until book/_static/attnbook.js has laid it out again
    (figures sized, scrolling boxes found: it counts its layouts in ``data-attn-layouts``) and the
    theme's transitions have ended (its sidebars slide in or out when the width crosses a step)."""
    count = "Number(document.documentElement.dataset.attnLayouts || 0)"
    before = page.evaluate(count)
    page.set_viewport_size(viewport)
    page.wait_for_function(f"() => {count} > {before}", timeout=10_000)
    page.wait_for_function(TRANSITIONS_ENDED_JS, timeout=10_000)


def check_page(page, log, name: str, has_math: bool) -> None:
    """What every page must show, at any width: typeset math and no raw TeX, images that loaded,
    a figure with alt text in each chapter, previous/next links to its neighbours in the table of
    contents that load, nothing fetched from outside localhost and no console error."""
    index = PAGES.index(name)
    text = page.evaluate("document.querySelector('main').innerText")
    assert "$$" not in text and "\\begin{" not in text, f"{name}: raw TeX left on the page"
    if has_math:
        assert page.evaluate("document.querySelectorAll('mjx-container').length") > 0
    broken = page.evaluate("[...document.images].filter(i => !(i.naturalWidth > 0)).map(i => i.src)")
    assert broken == [], f"{name}: images that did not load: {broken}"
    if name in CHAPTERS:  # a chapter has figures, each with alt text
        assert page.evaluate("document.querySelectorAll('main img').length") > 0, f"{name}: no figure"
        assert page.evaluate("[...document.querySelectorAll('main img')].every(i => i.alt.length > 0)"), (
            f"{name}: a figure without alt text"
        )
    links = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('a.left-prev, a.right-next')]"
        ".map(a => [a.classList.contains('left-prev') ? 'prev' : 'next', a.href]))"
    )
    if index + 1 < len(PAGES):
        assert links.get("next", "").endswith(f"/{PAGES[index + 1]}.html"), (name, links)
    if index > 0:
        assert links.get("prev", "").endswith(f"/{PAGES[index - 1]}.html"), (name, links)
    for href in links.values():  # each leads to a page the server has (that page is opened by its own test)
        assert page.request.get(href).status == 200, f"{name}: {href} does not load"
    assert log.problems == [], f"{name}: {log.problems}"


CHAPTERS = [p for p in PAGES if Path(p).name[:1].isdigit()]

#: the two screens every page is checked on (CSS pixels)
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
#: the smallest figure text a phone may show, in CSS pixels
SMALLEST_FIGURE_TEXT = 9.0

#: Everything inside the page's content that is cut off: an element whose content reaches past its
#: box while the box clips it (computed overflow-x hidden or clip), or an element reaching past the
#: right edge of the window that no scrolling box holds. MathJax's copy of each formula for screen
#: readers (mjx-assistive-mml) is clipped out of sight on purpose and does not count. Only the
#: outermost offender is listed.
CLIPPED_JS = """() => {
  const width = document.documentElement.clientWidth;
  const HIDDEN = 'mjx-assistive-mml, .visually-hidden, .sr-only';
  const shown = (el) => {
    if (el.closest(HIDDEN)) return false;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) return false;
    const s = getComputedStyle(el);
    return s.visibility !== 'hidden' && s.display !== 'none';
  };
  const describe = (el) => {
    const tag = el.tagName.toLowerCase() + [...el.classList].slice(0, 3).map(c => '.' + c).join('');
    const box = el.closest('[id]');
    const text = (el.innerText || el.textContent || '').replace(/\\s+/g, ' ').trim().slice(0, 80);
    return `${tag} in #${box ? box.id : '?'}: "${text}"`;
  };
  const scrolls = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const found = [], reported = new Set();
  for (const el of document.querySelectorAll('.bd-main *')) {
    let a = el.parentElement, inReported = false;
    for (; a; a = a.parentElement) if (reported.has(a)) { inReported = true; break; }
    if (inReported || !shown(el)) continue;
    const style = getComputedStyle(el), rect = el.getBoundingClientRect();
    if (['hidden', 'clip'].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1) {
      const edge = rect.left + el.clientLeft + el.clientWidth;
      let reach = 0;
      for (const d of el.querySelectorAll('*')) if (shown(d)) reach = Math.max(reach, d.getBoundingClientRect().right - edge);
      if (reach > 1) { found.push(`cut off by ${Math.round(reach)}px: ${describe(el)}`); reported.add(el); continue; }
    }
    if (rect.right > width + 1) {
      let held = false;
      for (a = el.parentElement; a && a !== document.body; a = a.parentElement) if (scrolls(a)) { held = true; break; }
      if (!held) { found.push(`past the right edge by ${Math.round(rect.right - width)}px: ${describe(el)}`); reported.add(el); }
    }
  }
  return found;
}"""

#: axe-core's moderate findings that stay, and why (anything else moderate, serious or critical fails)
KNOWN_MODERATE: dict[str, str] = {}


def _axe(page, context="document", **options) -> list[dict]:
    """axe-core's violations on the page as it is now (axe is injected once per page load)."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        try:
            from axe_playwright_python.sync_playwright import Axe
        except ImportError:
            pytest.fail("axe-playwright-python is not installed: `pip install -e '.[test]'`")
        page.evaluate(Axe().axe_script)
        page.evaluate(AXE_COLOUR_RULES_ON_SAMPLES)
    options = {"resultTypes": ["violations"], **options}
    return page.evaluate(
        f"axe.run({context}, {json.dumps(options)}).then(r => r.violations.map(v => ({{id: v.id, impact: v.impact,"
        " help: v.help, nodes: v.nodes.map(n => n.target.join(' ') + ': ' + (n.failureSummary || '')"
        ".replace(/\\s+/g, ' ').slice(0, 300))})))"
    )


#: the page on which the colours of what lies outside the article (sidebars, header) are checked: they
#: are the same elements in the same styles on every page
SIDEBARS_CHECKED_ON = "book/09_modern_attention"
#: the rules about colour (see accessibility_problems)
COLOUR_RULES = ["color-contrast", "link-in-text-block"]

#: the colour rules check the elements COLOUR_SAMPLES_JS marks (every other rule, every element)
AXE_COLOUR_RULES_ON_SAMPLES = """axe.configure({rules: [
  {id: 'color-contrast', selector: '[data-attn-colour-sample]'},
  {id: 'link-in-text-block', selector: 'a[href][data-attn-colour-sample], [role=link][data-attn-colour-sample]'},
]})"""

#: Marks (data-attn-colour-sample) one element of each look among the shown elements that hold text
#: of their own, and every form control; returns [marked, elements with text]. An element's look
#: is everything axe's colour rules read from it: its colour, the background behind it (the
#: nearest background colour up its ancestors, and any background image, filter or blend on the
#: way), its size and weight (large text has a lower bar), its opacity (with its ancestors') and
#: text shadow, and for a link its block's colour, its underline and its bottom border. Two
#: elements of one look have the same contrast, so a look that fails fails on its sample.
#: With outsideArticle, only what lies outside the article (sidebars, header) is sampled.
COLOUR_SAMPLES_JS = """(outsideArticle) => {
  for (const el of document.querySelectorAll('[data-attn-colour-sample]')) el.removeAttribute('data-attn-colour-sample');
  const looks = new Set();
  let withText = 0, marked = 0;
  const mark = (el) => { el.setAttribute('data-attn-colour-sample', ''); marked += 1; };
  const behind = (el) => {
    const layers = [];
    let opacity = 1;
    for (let a = el; a; a = a.parentElement) {
      const s = getComputedStyle(a);
      opacity *= parseFloat(s.opacity);
      if (s.backgroundImage !== 'none') layers.push(s.backgroundImage);
      if (s.filter !== 'none' || s.mixBlendMode !== 'normal') layers.push(s.filter + s.mixBlendMode);
      if (s.backgroundColor !== 'rgba(0, 0, 0, 0)') { layers.push(s.backgroundColor); break; }
    }
    return layers.join('|') + '|' + opacity.toFixed(3);
  };
  for (const el of document.body.querySelectorAll('*')) {
    if (outsideArticle && el.closest('.bd-article')) continue;
    if (el.matches('input, select, textarea, button')) { mark(el); continue; }
    const text = [...el.childNodes].some((n) => n.nodeType === Node.TEXT_NODE && n.textContent.trim());
    if (!text) continue;
    const r = el.getBoundingClientRect(), s = getComputedStyle(el);
    if (r.width === 0 || r.height === 0 || s.visibility === 'hidden' || s.display === 'none') continue;
    withText += 1;
    let look = [s.color, behind(el), s.fontSize, s.fontWeight, s.textShadow].join('/');
    if (el.matches('a[href], [role=link]')) {
      const block = el.parentElement ? getComputedStyle(el.parentElement).color : '';
      look += ['/link', block, s.textDecorationLine, s.borderBottomStyle, s.borderBottomColor].join('/');
    }
    if (looks.has(look)) continue;
    looks.add(look);
    mark(el);
  }
  return [marked, withText];
}"""


def accessibility_problems(page, log, label: str, screen: str, theme: str) -> list[str]:
    """axe-core on the page: no critical, serious or unexplained moderate violation.

    Every rule runs on every page at both widths in both themes, with two savings (colour contrast
    is nearly all of axe's time):

    - the rules about anything but colour run in light mode only: the two themes differ in
      colours only (the theme's ``html[data-theme]`` variables), not in what the page holds;
    - the colour rules check one element of each look (COLOUR_SAMPLES_JS: every other element of
      that look has the same contrast), at phone width on the whole page (the article's colours
      are the same at 1280 px) and, at desktop width, on one page, what lies outside the article
      (sidebars and header, which a phone does not show, the same elements in the same styles on
      every page: SIDEBARS_CHECKED_ON).

    At phone width in light mode one run of axe checks every rule.
    """
    before = len(log.problems)
    colour = screen == "phone" or label.startswith(SIDEBARS_CHECKED_ON)
    if colour:
        marked, with_text = page.evaluate(COLOUR_SAMPLES_JS, screen == "desktop")
        assert 0 < marked <= with_text, f"{label}: no element sampled for the colour rules ({marked}, {with_text})"
    if theme == "light":  # every rule; the colour rules only where they are due
        rules = {} if colour else {rule: {"enabled": False} for rule in COLOUR_RULES}
        violations = _axe(page, rules=rules)
    else:
        violations = _axe(page, runOnly=COLOUR_RULES) if colour else []
    # axe re-reads the stylesheets and resolves the theme's `@import "../basic.css"` against the page
    # instead of the stylesheet: the missing /basic.css it asks for is axe's, not the site's
    log.problems[before:] = [
        p for p in log.problems[before:] if not re.search(r"\.css$|the server responded with a status of 404", p)
    ]
    problems = []
    for v in violations:
        if v["impact"] in ("critical", "serious") or (v["impact"] == "moderate" and v["id"] not in KNOWN_MODERATE):
            problems.append(f"{label}: axe {v['impact']} {v['id']} ({v['help']}): {v['nodes'][:3]}")
    return problems


@functools.cache
def _figure_record(path: Path) -> dict:
    """The text chunks a chapter's figure carries (attnbook.figures.style.record_figure_text)."""
    from PIL import Image

    with Image.open(path) as image:
        return dict(getattr(image, "text", {}))


def figure_problems(page, label: str) -> list[str]:
    """Every figure opens at full size (a link to its image) and, as shown, its smallest text is at
    least SMALLEST_FIGURE_TEXT CSS pixels: the size recorded in the PNG (pixels of the PNG) times
    the figure's displayed width over its natural width."""
    figures = page.evaluate(
        "[...document.querySelectorAll('main figure img, main .cell_output img')].map(i => ({src: i.currentSrc || i.src,"
        " shown: i.getBoundingClientRect().width, natural: i.naturalWidth, link: i.closest('a')?.href || '',"
        " alt: i.alt.slice(0, 50)}))"
    )
    problems = []
    for figure in figures:
        name = f"{label}: figure '{figure['alt']}'"
        if figure["link"] != figure["src"]:
            problems.append(f"{name} does not open at full size (no link to its image)")
        path = SITE / urlparse(figure["src"]).path.lstrip("/")
        if path.suffix.lower() != ".png" or not path.exists():
            continue
        record = _figure_record(path)
        if "attnbook:texts" not in record:
            problems.append(f"{name}: {path.name} records no text (drawn without attnbook.figures.style.use_style?)")
        elif "attnbook:min-text-px" in record:
            smallest = float(record["attnbook:min-text-px"]) * figure["shown"] / figure["natural"]
            if smallest < SMALLEST_FIGURE_TEXT:
                problems.append(
                    f"{name}: its smallest text is {smallest:.1f} CSS px ({figure['natural']} px image shown"
                    f" {figure['shown']:.0f} px wide)"
                )
    return problems


def open_folded_content_with_the_keyboard(page, label: str) -> list[str]:
    """Every folded solution (sphinx-togglebutton), <details> block and tab opens from the keyboard:
    focus its control, press Enter (a tab: the arrow key)."""
    problems = []
    buttons = page.locator("main button.toggle-button")
    for i in range(buttons.count()):
        button = buttons.nth(i)
        target = button.get_attribute("data-target")
        button.focus()
        page.keyboard.press("Enter")
        if page.evaluate("t => document.getElementById(t).classList.contains('toggle-hidden')", target):
            problems.append(f"{label}: folded #{target} does not open with the keyboard")
    summaries = page.locator("main details:not([open]) > summary")
    for i in reversed(range(summaries.count())):  # the locator shrinks as they open
        summary = summaries.nth(i)
        summary.focus()
        page.keyboard.press("Enter")
    closed = page.evaluate("document.querySelectorAll('main details:not([open])').length")
    if closed:
        problems.append(f"{label}: {closed} <details> blocks do not open with the keyboard")
    tab_sets = page.locator("main .sd-tab-set")
    for i in range(tab_sets.count()):
        inputs = tab_sets.nth(i).locator(":scope > input")
        if inputs.count() > 1:
            inputs.first.focus()
            page.keyboard.press("ArrowRight")
            if not inputs.nth(1).is_checked():
                problems.append(f"{label}: tab set {i} does not switch tabs with the keyboard")
    return problems


def check_dark_theme(page, name: str) -> None:
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    channels = [int(c) for c in background[background.index("(") + 1 : background.index(")")].split(",")[:3]]
    assert sum(channels) < 3 * 80, f"{name}: dark mode background is {background}"
    # figures (white matplotlib PNGs) sit on white, not on the theme's grey (book/_static/attnbook.css)
    colours = page.evaluate(
        "[...document.querySelectorAll('main figure img, main .cell_output img')].map(i => getComputedStyle(i).backgroundColor)"
    )
    assert all(colour == "rgb(255, 255, 255)" for colour in colours), f"{name}: {colours}"


#: each page is a unit of work of its own, so that make test's workers share the pages (tests/units.py)
@pytest.mark.parametrize("name", by_unit(PAGES, "page"))
def test_page_in_the_browser(browser, site_url, name):
    check_page_in_the_browser(browser, site_url, name)


def check_page_in_the_browser(browser, site_url, name):
    """Each page, loaded once: in light mode at phone width, widened to a desktop screen, switched
    to dark mode (the reader's system preference changes; the theme follows it without a reload),
    and narrowed to phone width again.

    On all four: nothing is cut off (CLIPPED_JS; the folded solutions opened, from the keyboard),
    axe-core finds no critical or serious violation, the checks of check_page hold and the page
    does not scroll sideways. At phone width: figures are legible and open at full size, solutions
    start folded. In dark mode the background is dark and figures sit on white. Screenshots:
    phone light and dark, desktop light, and the first figure in dark mode. All problems are
    listed together."""
    context, page, log, has_math = open_page(browser, site_url, name, viewport=PHONE, color_scheme="light")
    shot = SHOTS / name.replace("/", "_")
    SHOTS.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    try:
        check_page(page, log, name, has_math)
        assert page.evaluate(
            "[...document.querySelectorAll('main .solution')].every(s => s.classList.contains('toggle-hidden'))"
        ), f"{name}: a solution of an exercise is shown unfolded"
        page.screenshot(path=f"{shot}-phone-light.png")
        problems += figure_problems(page, f"{name} (phone)")
        problems += open_folded_content_with_the_keyboard(page, name)
        for theme, screen in (("light", "phone"), ("light", "desktop"), ("dark", "desktop"), ("dark", "phone")):
            label = f"{name} ({screen}, {theme})"
            if page.viewport_size != (PHONE if screen == "phone" else DESKTOP):
                resize(page, PHONE if screen == "phone" else DESKTOP)
            if theme == "dark" and page.evaluate("document.documentElement.dataset.theme") != "dark":
                page.emulate_media(color_scheme="dark")
                page.wait_for_function("() => document.documentElement.dataset.theme === 'dark'", timeout=10_000)
                # the theme fades some colours over (CSS transitions): measure them once they have ended
                page.wait_for_function(TRANSITIONS_ENDED_JS, timeout=10_000)
                check_dark_theme(page, name)
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            if overflow > 1:
                problems.append(f"{label}: the page is {overflow}px wider than the screen")
            if (theme, screen) == ("light", "desktop"):
                page.screenshot(path=f"{shot}-desktop-light.png")
            problems += [f"{label}: {p}" for p in page.evaluate(CLIPPED_JS)]
            problems += accessibility_problems(page, log, label, screen, theme)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=f"{shot}-phone-dark.png")
        figures = page.locator("main figure img, main .cell_output img")
        if figures.count():  # and one screenshot showing the first figure
            figures.first.scroll_into_view_if_needed()
            page.screenshot(path=f"{shot}-phone-dark-figure.png")
        assert log.problems == [], f"{name}: {log.problems}"
        assert problems == [], "\n".join(problems)
    finally:
        context.close()


#: TeX left as text: a brace subscript or superscript, a backslash command, or a one-letter name
#: with a subscript (d_k, M_t, d_model), anywhere outside math ($...$ in a figure, MathJax on a page)
RAW_TEX = re.compile(r"_\{|\^\{|\\[A-Za-z]+|(?<![\w$\\])[A-Za-z]_[A-Za-z0-9]+\b")


def _outside_math(text: str) -> str:
    """``text`` without its matplotlib mathtext ($...$, unescaped dollars)."""
    return re.sub(r"(?<!\\)\$.*?(?<!\\)\$", " ", text)


def test_captions_and_figure_text_show_no_raw_tex(built_site):
    """Captions are MyST math and figure labels matplotlib mathtext: no caption of a chapter and no
    string a chapter's figure shows (titles, axis labels, legends, ticks, annotations: recorded in
    each PNG by attnbook.figures.style.record_figure_text) holds TeX as raw text."""
    import html as html_module

    problems = []
    for name in CHAPTERS:
        page = (built_site / f"{name}.html").read_text()
        main = page[page.index("<main") : page.index("</main>")]
        for caption in re.findall(r"<figcaption>(.*?)</figcaption>", main, re.S):
            text = re.sub(r'<span class="math[^"]*">.*?</span>', " ", caption, flags=re.S)  # MathJax renders it
            text = re.sub(r"<code[^>]*>.*?</code>", " ", text, flags=re.S)
            text = html_module.unescape(re.sub(r"<[^>]+>", "", text))
            if found := RAW_TEX.findall(text):
                problems.append(f"{name}: caption shows raw TeX {found}: {' '.join(text.split())[:120]}")
        for source in re.findall(r'<img[^>]*src="([^"]*_images/[^"]+\.png)"', main):  # the chapters' figures
            path = (built_site / name).parent / source
            record = _figure_record(path.resolve())
            if "attnbook:texts" not in record:
                problems.append(
                    f"{name}: figure {path.name} records no text (drawn without attnbook.figures.style.use_style?)"
                )
                continue
            for string in json.loads(record["attnbook:texts"]):
                if found := RAW_TEX.findall(_outside_math(string)):
                    problems.append(f"{name}: figure {path.name} shows raw TeX {found} in {string!r}")
    assert problems == [], "\n".join(problems)


def test_search_finds_a_term(browser, site_url):
    context, page, log, _ = open_page(browser, site_url, "search", query="?q=softmax")
    try:
        # results are appended one by one; the summary line appears when the search has finished
        page.wait_for_function(
            "() => /found/.test(document.querySelector('#search-results')?.innerText || '')", timeout=30_000
        )
        results = page.evaluate("[...document.querySelectorAll('#search-results li a')].map(a => a.href)")
        assert any("01_single_query_attention" in r for r in results), results
        assert log.problems == [], log.problems
    finally:
        context.close()


def test_sampled_colour_rules_still_find_a_planted_failure(browser, site_url):
    """The colour rules check one element of each look (COLOUR_SAMPLES_JS): a paragraph of grey on
    grey, and a link that differs from its text only by a colour too close to the text's, each
    one element among thousands, are found in both themes."""
    context, page, log, _ = open_page(browser, site_url, "book/01_single_query_attention", viewport=PHONE)
    try:
        page.evaluate(
            """() => {
              const first = document.querySelector('.bd-article p');
              const faint = document.createElement('p');
              faint.id = 'attn-planted-faint';
              faint.textContent = 'grey text on grey, planted by the test';
              Object.assign(faint.style, {color: 'rgb(150, 150, 150)', background: 'rgb(175, 175, 175)'});
              const text = document.createElement('p');
              text.textContent = 'text planted by the test, with ';
              Object.assign(text.style, {color: 'rgb(40, 40, 40)', background: 'rgb(255, 255, 255)'});
              const link = document.createElement('a');
              link.id = 'attn-planted-link';
              link.href = '#';
              link.textContent = 'a link that looks like the text';
              Object.assign(link.style, {color: 'rgb(75, 45, 45)', textDecoration: 'none', borderBottom: 'none'});
              text.append(link, ', in a sentence long enough to be a block of text that a reader reads as text.');
              first.after(faint, text);
            }"""
        )
        for theme in ("light", "dark"):
            if theme == "dark":
                page.emulate_media(color_scheme="dark")
                page.wait_for_function("() => document.documentElement.dataset.theme === 'dark'", timeout=10_000)
                page.wait_for_function(TRANSITIONS_ENDED_JS, timeout=10_000)
            found = accessibility_problems(page, log, f"planted ({theme})", "phone", theme)
            assert any("color-contrast" in p and "#attn-planted-faint" in p for p in found), (theme, found)
            assert any("link-in-text-block" in p and "#attn-planted-link" in p for p in found), (theme, found)
    finally:
        context.close()


def test_chapters_offer_a_notebook_download(built_site):
    assert CHAPTERS, "no chapter in _toc.yml"
    for name in CHAPTERS:
        assert "kernelspec:" in (ROOT / f"{name}.md").read_text()[:600], f"{name}.md is not a MyST notebook"
        notebook = built_site / "_sources" / f"{name}.ipynb"
        assert notebook.exists(), f"no .ipynb download for {name}"
        cells = json.loads(notebook.read_text())["cells"]
        assert any(c["cell_type"] == "code" for c in cells), f"{notebook} has no code cell"
        assert all(not c.get("outputs") for c in cells if c["cell_type"] == "code"), f"{notebook} holds outputs"
        # the first cell installs the course package where it is missing (Colab), and nothing else
        first = cells[0]
        assert "attnbook-install" in first["metadata"].get("tags", []), f"{notebook}: no install cell first"
        assert "%pip install" in "".join(first["source"]) and 'find_spec("attnbook")' in "".join(first["source"])
        html = (built_site / f"{name}.html").read_text()
        assert f"{Path(name).name}.ipynb" in html, f"{name}.html has no .ipynb download link"
        # Colab opens the published notebook (a .ipynb on the gh-pages branch), never the .md source
        colab = re.findall(r'href="(https://colab\.research\.google\.com/[^"]+)"', html)
        assert colab and all(url.endswith(f"/_sources/{name}.ipynb") and "/blob/gh-pages/" in url for url in colab), (
            f"{name}: Colab links {colab}"
        )


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_links_reference_pages_and_has_exercises(built_site, name):
    """Every chapter links the notation page and the glossary, links at least one glossary term,
    and ends with exercises whose solutions are folded dropdowns."""
    html = (built_site / f"{name}.html").read_text()
    main = html[html.index("<main") : html.index("</main>")]
    assert 'href="notation.html' in main, f"{name}: no link to the notation page"
    assert 'href="glossary.html"' in main or 'href="glossary.html#' in main, f"{name}: no link to the glossary"
    assert re.search(r'href="glossary\.html#term-[^"]+"', main), f"{name}: no glossary term is linked"
    # nothing a reader should not see: warnings or log lines on stderr (e.g. matplotlib's font cache)
    assert 'class="output stderr' not in main, f"{name}: a cell printed to stderr"
    exercises = len(re.findall(r'<div class="exercise admonition"', main))
    solutions = len(re.findall(r'<div class="solution[^"]*dropdown', main))
    assert exercises >= 2, f"{name}: {exercises} exercises (expected at least 2)"
    assert solutions == exercises, f"{name}: {exercises} exercises but {solutions} folded solutions"


def test_permutation_chapter_states_theorems_with_proofs(built_site):
    main = (built_site / "book" / "06_permutation_properties.html").read_text()
    theorems = len(re.findall(r'<div class="proof (?:theorem|corollary) admonition"', main))
    proofs = len(re.findall(r'<div class="proof admonition"', main))
    assert theorems >= 5 and proofs >= theorems, (theorems, proofs)
