"""Units of work for ``make test``'s parallel workers (pytest-xdist; the scheduler is tests/plugins/units.py).

A unit runs whole on one worker. By default a unit is a test file, so that a module-scoped fixture
is set up once. A file whose tests need nothing in common but take long splits itself into units,
so that the two workers share it instead of one running it all while the other waits:

    @pytest.mark.parametrize("name", by_unit(HOMEWORK, "mutations"))    # a unit per homework
    @unit("cli: benchmark")                                            # a test that is a unit

pytest-xdist's controller, which hands the units out, sees nothing of a test but its id, so a
test's unit is written into its id: ``by_unit`` gives each parameter the id ``@<prefix>:<value>``
(followed by the other values, ``-``-separated), ``unit`` gives the test a parameter ``unit`` whose
id is ``@<name>``. :func:`unit_of` reads it back:

    tests/attngrade/test_integrity.py::test_x                        -> tests/attngrade/test_integrity.py
    tests/homework/test_mutations.py::test_mutant_loses_points[@mutations:hw08-wrong_scale]
                                                                     -> mutations:hw08
    tests/attngrade/test_grading_cli.py::test_benchmark_reports_both_graders[@cli: benchmark]
                                                                     -> cli: benchmark

Tests that share a unit name share a worker (and their module's fixtures).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import pytest

#: a unit's name in a test id: ``@`` after the ``[`` that opens the parameters or a ``-`` between
#: two of them, up to the next ``-`` or ``]``
_TAG = re.compile(r"(?:\[|-)@([^\]-]+)")


def unit_of(nodeid: str) -> str:
    """The unit of work of the test ``nodeid``: the unit its id names, else its file."""
    path, _, test = nodeid.partition("::")
    named = _TAG.search(test)
    return named[1] if named else path


def _checked(name: str) -> str:
    if not name or any(c in name for c in "-]@"):
        raise ValueError(f"a unit's name may not be empty or hold '-', ']' or '@' (it is read from test ids): {name!r}")
    return name


def unit(name: str) -> Callable:
    """Decorate a test (all its parameters) to be one unit of work named ``name``: the test gets a
    parameter ``unit`` (``usefixtures`` lets a test be parametrised by a name it does not take) with
    the id ``@<name>``."""
    param = pytest.param(name, id=f"@{_checked(name)}")

    def decorate(test):
        return pytest.mark.usefixtures("unit")(pytest.mark.parametrize("unit", [param])(test))

    return decorate


def by_unit(values: Iterable, prefix: str) -> list:
    """Parameters, each in the unit ``<prefix>:<value>`` (a tuple value: of its first element), with
    the id ``@<prefix>:<first>-<the others>``."""
    params = []
    for value in values:
        value = value if isinstance(value, tuple) else (value,)
        tag = f"@{_checked(f'{prefix}:{value[0]}')}"
        params.append(pytest.param(*value, id="-".join([tag, *map(str, value[1:])])))
    return params
