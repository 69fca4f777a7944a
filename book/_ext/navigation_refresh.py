"""Rewrite every page when the book's navigation changes, so that no page keeps stale links.

Each page of the site carries the navigation: the sidebar (every page's title, in table-of-contents
order) and the "previous" and "next" links. On an incremental build Sphinx rewrites only the pages
whose source changed, plus the page holding the changed toctree (sphinx-external-toc). So after a
chapter is added to ``_toc.yml`` or renamed, the unchanged pages keep their old sidebar and the
chapter before the new one keeps its old "next" link.

This extension stores a signature of the navigation (the table of contents and every page's
title) in the build environment; when it differs from the previous build's, every page is
rewritten. Writing a page reuses its stored doctree: nothing is re-read or re-executed.
"""

from __future__ import annotations

import hashlib
import json


def _signature(env) -> str:
    site_map = getattr(env, "external_site_map", None)
    toc = site_map.as_json() if site_map is not None else None
    titles = {name: title.astext() for name, title in env.titles.items()}
    text = json.dumps({"toc": toc, "titles": titles}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def rewrite_all_if_navigation_changed(app, env):
    signature = _signature(env)
    previous = getattr(env, "attnbook_navigation_signature", None)
    env.attnbook_navigation_signature = signature
    if previous is not None and previous != signature:
        return sorted(env.found_docs)
    return []


def setup(app):
    app.connect("env-updated", rewrite_all_if_navigation_changed)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}
