"""The built website, opened offline in headless Chromium (Playwright driving Debian's chromium).

For every page of the table of contents: math is typeset by the bundled MathJax, every image
loads, the previous/next links lead to the neighbouring pages, nothing is fetched from outside
localhost and the console shows no errors. The chapters are opened the way a phone in dark mode
shows them (no sideways scrolling, dark background, figures on white, solutions folded), the other
pages on a desktop screen: each page is loaded once (a load costs seconds of CPU: the theme's icons
and MathJax). The search page must find a term. A screenshot of each page is saved under
``_build/screenshots/``.

The site is the one ``make book`` built (``_build/html``), or the one named by the environment
variable ``ATTNBOOK_SITE`` (screenshots then go beside it); if there is none, a non-strict build
is made first. Without Chromium or Playwright the test is skipped with a message saying how to get
them (CI installs both, so there it always runs).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
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
    for candidate in (
        os.environ.get("CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def toc_pages() -> list[str]:
    """Page names (e.g. 'book/00_notation') in reading order, from _toc.yml."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [chapter["file"] for chapter in part["chapters"]]
    return pages


PAGES = toc_pages()


def _wait_for_the_chapters(session, timeout: float = 900.0) -> None:
    """With pytest-xdist (``make test``), chapters run in the other worker too: wait until every
    chapter of this run has finished (conftest.py marks each), so the build finds their outputs."""
    if "PYTEST_XDIST_TESTRUNUID" not in os.environ:
        return  # one process: the chapters (collected first) have run already
    from chapters import finished_folder  # book/_ext, put on the path by conftest.py

    chapters = {item.nodeid.split("::")[0].split("/")[-1] for item in session.items if item.nodeid.startswith("book/")}
    folder = finished_folder(ROOT)
    deadline = time.monotonic() + timeout
    while not all((folder / name).exists() for name in chapters) and time.monotonic() < deadline:
        time.sleep(1.0)


@pytest.fixture(scope="session")
def built_site(request) -> Path:
    """The site, built strictly (``jupyter-book build -W -n --keep-going``: any warning fails).

    Run after the chapters (pytest collects ``book/`` first), the build reuses the outputs nbval
    stored in its execution cache (conftest.py), so no chapter executes twice. With
    ``ATTNBOOK_SITE`` set, that site is tested as it is.
    """
    if "ATTNBOOK_SITE" in os.environ:
        if not (SITE / "index.html").exists():
            pytest.fail(f"ATTNBOOK_SITE={SITE} holds no built site (index.html)")
        return SITE
    _wait_for_the_chapters(request.session)
    build = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", "-W", "-n", "--keep-going", str(ROOT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if build.returncode != 0:
        log = build.stdout + build.stderr
        problems = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line or "Error" in line]
        pytest.fail("the strict book build failed:\n" + "\n".join(problems[:40] or log.splitlines()[-40:]))
    executed = [line for line in build.stdout.splitlines() if "Executing" in line and "Executing notebook" in line]
    print(f"book built; chapters executed by the build (not found in the cache): {len(executed)}")
    return SITE


def test_book_builds_strictly(built_site):
    assert (built_site / "index.html").exists()


@pytest.fixture(scope="module")
def site_url(built_site):
    executable = _chromium()
    if executable is None:
        pytest.skip("Chromium is not installed: `apt-get install chromium` (Debian) to run the browser test")
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
    return context, page, log, has_math


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


@pytest.mark.parametrize("name", [p for p in PAGES if p not in CHAPTERS])
def test_page_renders_offline(browser, site_url, name):
    """The pages that are not chapters, on a desktop screen (the chapters are opened at phone width
    in dark mode, below, with the same checks: a page load costs seconds of CPU)."""
    context, page, log, has_math = open_page(browser, site_url, name, viewport={"width": 1280, "height": 900})
    try:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name.replace('/', '_')}.png"), full_page=False)
        check_page(page, log, name, has_math)
    finally:
        context.close()


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_renders_offline_at_phone_width_in_dark_mode(browser, site_url, name):
    context, page, log, has_math = open_page(
        browser, site_url, name, viewport={"width": 390, "height": 844}, color_scheme="dark", device_scale_factor=2
    )
    try:
        check_page(page, log, name, has_math)
        # the page itself does not scroll sideways (wide tables and figures scroll inside their box)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 1, f"{name}: page is {overflow}px wider than a phone screen"
        assert page.evaluate("document.documentElement.dataset.theme") == "dark"
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        channels = [int(c) for c in background[background.index("(") + 1 : background.index(")")].split(",")[:3]]
        assert sum(channels) < 3 * 80, f"{name}: dark mode background is {background}"
        # figures (white matplotlib PNGs) sit on white, not on the theme's grey (book/_static/attnbook.css),
        # and are no wider than the screen
        figures = page.evaluate(
            "[...document.querySelectorAll('main figure img, main .cell_output img')]"
            ".map(i => [getComputedStyle(i).backgroundColor, i.getBoundingClientRect().right])"
        )
        assert all(colour == "rgb(255, 255, 255)" for colour, _ in figures), f"{name}: {figures}"
        assert all(right <= 390 + 1 for _, right in figures), f"{name}: a figure is wider than the phone: {figures}"
        # solutions of the in-book exercises start folded away
        assert page.evaluate(
            "[...document.querySelectorAll('main .solution')].every(s => s.classList.contains('toggle-hidden'))"
        ), f"{name}: a solution of an exercise is shown unfolded"
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name.replace('/', '_')}-phone-dark.png"))
        if figures:  # and one screenshot showing the first figure
            page.locator("main figure img, main .cell_output img").first.scroll_into_view_if_needed()
            page.screenshot(path=str(SHOTS / f"{name.replace('/', '_')}-phone-dark-figure.png"))
        assert log.problems == [], f"{name}: {log.problems}"
    finally:
        context.close()


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
