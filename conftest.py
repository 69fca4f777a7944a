"""pytest's plugins for this repository, in tests/plugins/: ``chapters`` runs every chapter of the
book through nbval (once, its outputs kept for the book build), ``units`` hands make test's units of
work to the pytest-xdist workers (longest first; chapters, then the book, then the browser) and
``time_table`` ends a run with where its time went. Fixtures for the tests are in tests/conftest.py."""

pytest_plugins = ["tests.plugins.chapters", "tests.plugins.units", "tests.plugins.time_table"]
