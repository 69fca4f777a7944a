"""Offer every chapter as a Jupyter notebook (.ipynb) from the page's download menu.

The chapters are stored as MyST markdown. For each page whose source is a MyST notebook (it has a
jupytext ``kernelspec``), this extension writes the jupytext conversion to
``_sources/<page>.ipynb`` in the built site (inputs only: the reader runs it) and sets the page
context variable ``ipynb_source``, which sphinx-book-theme turns into a ".ipynb" entry in the
download menu next to the ".md" source.
"""

from __future__ import annotations

from pathlib import Path

import jupytext


def _is_notebook(source: Path) -> bool:
    head = source.read_text(encoding="utf-8")[:600]
    return head.startswith("---") and "kernelspec:" in head


def add_notebook_download(app, pagename, templatename, context, doctree):
    if doctree is None or app.builder.format != "html":
        return
    source = Path(app.env.doc2path(pagename))
    if source.suffix != ".md" or not _is_notebook(source):
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(jupytext.read(source), target, fmt="ipynb")
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app):
    # run before sphinx-book-theme builds its header buttons (default priority 500)
    app.connect("html-page-context", add_notebook_download, priority=400)
    # and again after its launch buttons (priority 501), which copy the *executed* notebook (with
    # outputs) to the same _sources/<page>.ipynb when launch buttons are configured
    app.connect("html-page-context", add_notebook_download, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
