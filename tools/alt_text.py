"""Each diagram's alt text on the page, and the alt text its drawing function wrote.

A chapter shows a diagram of :mod:`attnbook.figures` in a code cell (``fig = draw_x(...)`` then
``plt.show()``); the site reads its alt text from the cell's ``mystnb.image.alt``, and the drawing
function writes its own, describing what it drew (:func:`attnbook.figures.style.alt_text`). The two
must be the same words (``tests/attnbook/test_diagrams.py`` checks it). After changing a diagram or
its arguments, write the function's alt text into the page::

    .venv/bin/python -m tools.alt_text book/02_masked_attention.md      # rewrites the alt lines
    .venv/bin/python -m tools.alt_text --check book/*.md                 # lists the differences

A diagram cell runs after the chapter's first code cell (its imports); a chapter whose diagram
draws what earlier cells computed is listed in :data:`DRAWS_EARLIER_RESULTS`, and then every
earlier cell runs first.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

#: chapters whose diagram cell draws what earlier cells computed (they run after all the cells above)
DRAWS_EARLIER_RESULTS = {"01_single_query_attention": "the worked example's q, K and V"}
DRAW_CALL = re.compile(r"\bdraw_\w+\(")
ALT_LINE = re.compile(r"^(?P<indent> *)alt: ")


@dataclass(frozen=True)
class DiagramCell:
    index: int  # among the chapter's code cells
    source: str
    page_alt: str  # the cell's mystnb.image.alt, white space folded
    drawn_alt: str  # what the drawing function wrote
    caption: str


def fold(text: str) -> str:
    return " ".join(text.split())


def diagram_cells(chapter: Path) -> list[DiagramCell]:
    """Run a chapter's diagram cells (``plt.show`` draws nothing) and pair each page alt text with the drawn one."""
    import jupytext
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnbook.figures.style import alt_text

    code = [c for c in jupytext.read(chapter).cells if c.cell_type == "code"]
    indices = [i for i, c in enumerate(code) if DRAW_CALL.search(c.source) and "plt.show()" in c.source]
    found: list[DiagramCell] = []
    namespace: dict = {}
    ran = 0
    show, plt.show = plt.show, lambda *args, **kwargs: None
    try:
        for index in indices:
            run_up_to = index if chapter.stem in DRAWS_EARLIER_RESULTS else 1
            for cell in code[ran:run_up_to]:
                exec(cell.source, namespace)
            ran = max(ran, run_up_to)
            cell = code[index]
            exec(cell.source, namespace)
            options = cell.metadata.get("mystnb", {})
            found.append(
                DiagramCell(
                    index,
                    cell.source,
                    fold(options.get("image", {}).get("alt", "")),
                    alt_text(namespace["fig"]),
                    options.get("figure", {}).get("caption", ""),
                )
            )
            plt.close("all")
    finally:
        plt.show = show
    return found


def _yaml_block(indent: str, text: str) -> list[str]:
    """``alt: '...'`` as single-quoted YAML wrapped at 100 columns (a colon inside stays text)."""
    quoted = "'" + text.replace("'", "''") + "'"
    lines = textwrap.wrap(
        quoted, width=100, initial_indent=f"{indent}alt: ", subsequent_indent=indent + "  ", break_on_hyphens=False
    )
    return [line + "\n" for line in lines]


def rewrite(chapter: Path) -> int:
    """Write each diagram's drawn alt text over its page alt text; the number of cells changed."""
    import yaml

    changes = {cell.page_alt: cell.drawn_alt for cell in diagram_cells(chapter) if cell.page_alt != cell.drawn_alt}
    lines = chapter.read_text().splitlines(keepends=True)
    out, i, done = [], 0, 0
    while i < len(lines):
        match = ALT_LINE.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        indent = match["indent"]
        j = i + 1
        while j < len(lines) and lines[j].startswith(indent + "  ") and lines[j].strip():
            j += 1
        page = fold(str(yaml.safe_load("".join(line[len(indent) :] for line in lines[i:j]))["alt"]))
        if page in changes:
            out += _yaml_block(indent, changes[page])
            done += 1
        else:
            out += lines[i:j]
        i = j
    chapter.write_text("".join(out))
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="list the differences, change nothing")
    args = parser.parse_args(argv)
    differ = 0
    for chapter in args.chapters:
        if args.check:
            for cell in diagram_cells(chapter):
                if cell.page_alt != cell.drawn_alt:
                    differ += 1
                    print(f"{chapter}, code cell {cell.index}:\n  page:  {cell.page_alt}\n  drawn: {cell.drawn_alt}")
        else:
            print(f"{chapter}: {rewrite(chapter)} alt text(s) rewritten")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
