"""The plugins the root ``conftest.py`` names: ``chapters`` (every chapter of the book through nbval,
its outputs handed to the book build), ``units`` (make test's units of work, handed to the workers
longest first: chapters, then the book, then the browser) and ``time_table`` (where a run's time went)."""
