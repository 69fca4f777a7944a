"""Drop duplicate <script> entries from every page.

With Jupyter Book 1.0.4, sphinx-thebe's inline configuration script (``const THEBE_JS_URL = ...``)
is registered twice (with different priorities), and the second copy throws "Identifier
'THEBE_JS_URL' has already been declared" in the browser console. Keeping the first of each script
with the same source and attributes fixes it. It runs early (priority 100) because Sphinx stops
calling ``html-page-context`` handlers once one of them returns a template name.
"""

from __future__ import annotations


def remove_duplicate_scripts(app, pagename, templatename, context, doctree):
    unique, seen = [], set()
    for script in list(context.get("script_files", [])):
        # the second copy has filename "" where the first has None
        identity = (str(script.filename or ""), tuple(sorted(script.attributes.items())))
        if identity not in seen:
            seen.add(identity)
            unique.append(script)
    # in place: handlers that run later (sphinx.ext.mathjax) append to this same list
    context["script_files"][:] = unique


def setup(app):
    app.connect("html-page-context", remove_duplicate_scripts, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
