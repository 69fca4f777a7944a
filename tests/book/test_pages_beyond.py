"""The second half of the book's pages in the browser: the chapters beyond the seeds and the reference
pages (the first half and every check's description: ``test_site.py``, ``check_page_in_the_browser``).

A file of its own so that ``make test``'s two workers, which take whole files, check the two halves
at the same time; the first to need the site builds it and the other waits for that build.
"""

from __future__ import annotations

import pytest

from .test_site import SECOND_HALF, browser, built_site, check_page_in_the_browser, site_url  # noqa: F401  (fixtures)


@pytest.mark.parametrize("name", SECOND_HALF)
def test_page_in_the_browser(browser, site_url, name):  # noqa: F811  (the fixtures imported above)
    check_page_in_the_browser(browser, site_url, name)
