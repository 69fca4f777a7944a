"""The check itself: make test's units of work (tests/units.py) and their order (conftest.py ORDER)."""

from __future__ import annotations

import re

import pytest

from .paths import ROOT
from .units import by_unit, unit


def test_every_entry_of_the_order_names_something_that_exists():
    """An ORDER entry is a path (a chapter, a test file, a folder) or the name of a unit that a test
    file declares; a renamed file or unit must not drop out of the order unnoticed."""
    import conftest

    sources = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("test_*.py"))
    declared = set(re.findall(r'unit\("([^"]+)"\)', sources))
    declared |= {f"{prefix}:" for prefix in re.findall(r'by_unit\([^,]+, "([^"]+)"\)', sources)}
    missing = []
    for entry in conftest.ORDER:
        if "/" in entry:
            if not (ROOT / entry).exists():
                missing.append(entry)
        elif not any(name == entry or name.startswith(entry) or entry.startswith(name) for name in declared):
            missing.append(entry)
    assert not missing, f"ORDER entries that name no file and no declared unit: {missing}"


def test_units_are_xdist_groups_on_the_tests_they_mark():
    params = by_unit(["hw00", ("hw01", "a mutant")], "mutations")
    assert [p.values for p in params] == [("hw00",), ("hw01", "a mutant")]
    assert [p.marks[0].args for p in params] == [("mutations:hw00",), ("mutations:hw01",)]
    assert unit("cli: benchmark").mark == pytest.mark.xdist_group("cli: benchmark").mark
