"""Where the tests find the repository, their fixtures and their helper scripts, wherever
in tests/ a test file sits."""

import os

HELPERS = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HELPERS)
REPO = os.path.dirname(TESTS)
FIXTURES = os.path.join(TESTS, "fixtures")
