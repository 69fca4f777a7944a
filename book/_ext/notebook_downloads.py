"""Offer every chapter as a Jupyter notebook (.ipynb), to download and to open in Colab.

The chapters are stored as MyST markdown. For each page whose source is a MyST notebook (it has a
jupytext ``kernelspec``), this extension

* writes the jupytext conversion to ``_sources/<page>.ipynb`` in the built site (inputs only: the
  reader runs it), preceded by one cell that installs the course package when it is missing (on
  Colab, say), and sets the page context variable ``ipynb_source``, which sphinx-book-theme turns
  into a ".ipynb" entry in the download menu next to the ".md" source;
* points the Colab launch button at that notebook in the *published* site. sphinx-book-theme would
  point it at the chapter's ``.md`` file in the repository, which Colab cannot open; Colab opens
  notebooks from a GitHub branch, and the site is published to the branch ``gh-pages``
  (``ghp-import -n -p -f _build/html``, see the instructors' page), where the notebook lies at
  ``_sources/<page>.ipynb``. The branch is the Sphinx setting ``attnbook_colab_branch``.
"""

from __future__ import annotations

from pathlib import Path

import jupytext
from chapters import is_chapter  # book/_ext/chapters.py (local_extensions puts book/_ext on the path)
from nbformat.v4 import new_code_cell

# The first cell of every downloaded notebook. In the course's environment it does nothing.
INSTALL_CELL = """\
# Running this notebook outside the course's environment (on Colab, say)? This cell installs the
# course package `attnbook` from {repository}. In the course's environment it does nothing.
import importlib.util

if importlib.util.find_spec("attnbook") is None:
    %pip install --quiet "attnbook @ git+{repository}"
"""


def _repository(app) -> str:
    return app.config.html_theme_options.get("repository_url", "").rstrip("/")


def chapter_notebook(source: Path, repository: str):
    """The chapter's notebook: its cells, without outputs, after the cell that installs attnbook."""
    notebook = jupytext.read(source)
    cell = new_code_cell(INSTALL_CELL.format(repository=repository or "the course's repository"))
    cell.metadata["tags"] = ["attnbook-install"]
    notebook.cells.insert(0, cell)
    return notebook


def add_notebook_download(app, pagename, templatename, context, doctree):
    if doctree is None or app.builder.format != "html":
        return
    source = Path(app.env.doc2path(pagename))
    if source.suffix != ".md" or not is_chapter(source):
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(chapter_notebook(source, _repository(app)), target, fmt="ipynb")
    context["ipynb_source"] = f"{pagename}.ipynb"
    _point_colab_at_notebook(app, pagename, context)


def _point_colab_at_notebook(app, pagename, context):
    repository = _repository(app)
    if not repository.startswith("https://github.com/"):
        return
    owner_repo = repository.removeprefix("https://github.com/")
    url = (
        f"https://colab.research.google.com/github/{owner_repo}/blob/"
        f"{app.config.attnbook_colab_branch}/_sources/{pagename}.ipynb"
    )
    for group in context.get("header_buttons", []):
        for button in group.get("buttons", []) if group.get("label") == "launch-buttons" else []:
            if button.get("text") == "Colab":
                button["url"] = url


def setup(app):
    app.add_config_value("attnbook_colab_branch", "gh-pages", "html")
    # run before sphinx-book-theme builds its header buttons (default priority 500)
    app.connect("html-page-context", add_notebook_download, priority=400)
    # and again after its launch buttons (priority 501), which copy the *executed* notebook (with
    # outputs) to the same _sources/<page>.ipynb when launch buttons are configured, and which add
    # the Colab button this rewrites
    app.connect("html-page-context", add_notebook_download, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
