"""A chapter opened in JupyterLab renders as on the website (jupyterlab-myst), in headless Chromium.

``make setup`` installs ``jupyterlab-myst`` and the course's JupyterLab settings
(``src/jupyterlab_settings/overrides.json``, which the package installs: chapters open as notebooks through jupytext, no
"Jupyter news" pop-up). This test starts JupyterLab on ``book/``, opens the permutation chapter and
checks that its theorems and proofs render as MyST blocks, not as raw directive text, that its
exercise solutions are folded, and that no notification pops up. A screenshot is saved as
``_build/screenshots/jupyterlab-06_permutation_properties.png``. Without Chromium or Playwright it is
skipped with a message saying how to get them (CI installs both).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..paths import ROOT  # noqa: E402
from .test_site import CHROMIUM_ARGS, CHROMIUM_MISSING, _chromium

CHAPTER = "06_permutation_properties.md"
SHOTS = ROOT / "_build" / "screenshots"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_course_settings_are_installed():
    """The settings JupyterLab reads (sys.prefix/share/jupyter/lab/settings) are the course's."""
    installed = Path(sys.prefix) / "share" / "jupyter" / "lab" / "settings" / "overrides.json"
    ours = json.loads((ROOT / "src" / "jupyterlab_settings" / "overrides.json").read_text())
    assert installed.exists(), f"{installed} is missing: run `make setup`"
    assert json.loads(installed.read_text()) == ours
    assert ours["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if _chromium() is None:
        pytest.skip(CHROMIUM_MISSING)
    try:
        import playwright  # noqa: F401
    except ImportError:
        pytest.skip("Playwright is not installed: `pip install -e '.[test]'`")
    import jupyterlab_myst  # noqa: F401  (a missing extension is a failure: the set-up installs it)

    home = tmp_path_factory.mktemp("jupyter")
    # render every cell, not only those in view, so that the whole chapter can be checked
    tracker = home / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    port = _free_port()
    env = dict(
        os.environ,
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTERLAB_WORKSPACES_DIR=str(home / "ws"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
    )
    command = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        f"--port={port}",
        "--ServerApp.token=",
        "--ServerApp.password=",
        f"--ServerApp.root_dir={ROOT / 'book'}",
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log = open(home / "lab.log", "w")
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(home / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()


def test_chapter_renders_theorems_in_jupyterlab(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{lab}/lab/tree/{CHAPTER}")
            # jupyterlab-myst renders {prf:theorem} and {prf:proof} as .myst-proof blocks
            page.wait_for_selector(".jp-MarkdownCell .myst-proof", state="attached", timeout=60_000)
            page.wait_for_timeout(1000)
            page.evaluate("document.querySelector('.jp-MarkdownCell .myst-proof').scrollIntoView()")
            page.wait_for_timeout(500)
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / f"jupyterlab-{Path(CHAPTER).stem}.png"))
            proofs = page.evaluate(
                "Array.from(document.querySelectorAll('.jp-MarkdownCell .myst-proof'))"
                ".map(e => e.innerText.split('\\n')[0])"
            )
            raw = page.evaluate(
                "Array.from(document.querySelectorAll('.jp-MarkdownCell'))"
                ".map(c => c.innerText).filter(t => /\\{prf:|:label:|\\{solution-start\\}/.test(t))"
            )
            solutions = page.evaluate(
                "Array.from(document.querySelectorAll('.jp-MarkdownCell details'))"
                ".filter(d => /Solution/.test(d.innerText)).map(d => d.open)"
            )
            toasts = page.evaluate("document.querySelectorAll('.Toastify__toast').length")
        finally:
            browser.close()
    assert any(title.startswith("Theorem") for title in proofs), f"no theorem rendered as one: {proofs}"
    assert any(title.startswith("Proof") for title in proofs), f"no proof rendered as one: {proofs}"
    assert not raw, f"markdown cells show raw MyST directives: {[t[:80] for t in raw]}"
    expected = (ROOT / "book" / CHAPTER).read_text().count("{solution-start}")
    assert len(solutions) == expected, f"{expected} solutions in the chapter, {len(solutions)} rendered as folds"
    assert not any(solutions), "exercise solutions must be folded"
    assert toasts == 0, "a notification (e.g. Jupyter news) popped up"
