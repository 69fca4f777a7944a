"""Units of work for ``make test``'s parallel workers (pytest-xdist, ``--dist loadgroup``).

A unit runs whole on one worker. By default a unit is a test file (the scheduler in the root
``conftest.py`` puts a test that has no unit of its own in its file's), so a module-scoped fixture
is set up once.
A file whose tests need nothing in common but take long splits itself into units, so that the
two workers share it instead of one running it all while the other waits:

    @pytest.mark.parametrize("name", by_unit(HOMEWORK, "mutations"))    # a unit per homework
    @unit("cli: benchmark")                                            # a test that is a unit

Tests of one file that share a unit name share a worker (and their module's fixtures).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest


def unit(name: str) -> pytest.MarkDecorator:
    """The mark that makes a test (or the tests it decorates) one unit of work named ``name``."""
    return pytest.mark.xdist_group(name)


def by_unit(values: Iterable, prefix: str) -> list:
    """Parameters, each in the unit ``<prefix>:<value>`` (a tuple value: its first element)."""
    params = []
    for value in values:
        key = value[0] if isinstance(value, tuple) else value
        params.append(pytest.param(*(value if isinstance(value, tuple) else (value,)), marks=unit(f"{prefix}:{key}")))
    return params
