"""Rewrite every page when the book's navigation or the site's own static files change, so that
no page keeps stale links and no edited stylesheet or script stays unpublished.

Each page of the site carries the navigation: the sidebar (every page's title, in table-of-contents
order) and the "previous" and "next" links. On an incremental build Sphinx rewrites only the pages
whose source changed, plus the page holding the changed toctree (sphinx-external-toc). So after a
chapter is added to ``_toc.yml`` or renamed, the unchanged pages keep their old sidebar and the
chapter before the new one keeps its old "next" link.

Static files (``html_static_path``: book/_static/attnbook.css, attnbook.js) are copied only when
some page is written, and each page links them with a checksum of their content (``?v=``). So after
an edit of attnbook.css alone, an incremental build reports nothing to do and the site keeps the
old stylesheet.

This extension stores a signature of both (the table of contents, every page's title, and the
names and contents of the static files) in the build environment; when it differs from the
previous build's, every page is rewritten and the static files are copied again. Writing a page
reuses its stored doctree: nothing is re-read or re-executed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def _static_files(app) -> dict[str, str]:
    """Each file of ``html_static_path``: its path there -> the SHA-256 of its content."""
    files = {}
    for entry in app.config.html_static_path:
        folder = Path(app.confdir, entry)
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            files[f"{entry}/{path.relative_to(folder).as_posix()}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return files


def _signature(app, env) -> str:
    site_map = getattr(env, "external_site_map", None)
    toc = site_map.as_json() if site_map is not None else None
    titles = {name: title.astext() for name, title in env.titles.items()}
    text = json.dumps({"toc": toc, "titles": titles, "static": _static_files(app)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def rewrite_all_if_navigation_changed(app, env):
    signature = _signature(app, env)
    previous = getattr(env, "attnbook_navigation_signature", None)
    env.attnbook_navigation_signature = signature
    if previous is not None and previous != signature:
        return sorted(env.found_docs)
    return []


def setup(app):
    app.connect("env-updated", rewrite_all_if_navigation_changed)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
