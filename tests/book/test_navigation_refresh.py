"""book/_ext/navigation_refresh.py on a two-page Sphinx project: an incremental build after an edit
of a static file alone publishes the new file, and every page links it by its new checksum."""

from __future__ import annotations

import io
import re

from ..paths import ROOT

EXTENSIONS = ROOT / "book" / "_ext"


def build(src, out) -> str:
    """Build ``src`` into ``out`` (incrementally after the first time); Sphinx's log."""
    from sphinx.application import Sphinx

    log = io.StringIO()
    app = Sphinx(str(src), str(src), str(out / "html"), str(out / "doctrees"), "html", status=log, warning=log)
    app.build()
    return log.getvalue()


def css_link(page) -> str:
    (link,) = re.findall(r'href="_static/site\.css\?v=([0-9a-f]+)"', page.read_text(encoding="utf-8"))
    return link


def test_an_edited_static_file_reaches_the_site_and_every_page_links_it_anew(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "_static").mkdir(parents=True)
    (src / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(EXTENSIONS)!r})\nextensions = ['navigation_refresh']\n"
        "html_static_path = ['_static']\nhtml_css_files = ['site.css']\n"
    )
    (src / "index.rst").write_text("Home\n====\n\n.. toctree::\n\n   page\n")
    (src / "page.rst").write_text("Page\n====\n\nText.\n")
    css = src / "_static" / "site.css"
    css.write_text("p { color: #111111; }\n")
    build(src, out)
    before = {name: css_link(out / "html" / f"{name}.html") for name in ("index", "page")}
    assert "no targets are out of date" in build(src, out)  # nothing changed: nothing written
    css.write_text("p { color: #222222; }\n")
    build(src, out)
    assert (out / "html" / "_static" / "site.css").read_text() == css.read_text()
    after = {name: css_link(out / "html" / f"{name}.html") for name in ("index", "page")}
    assert all(after[name] != before[name] for name in before), (before, after)
