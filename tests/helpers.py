"""
Helpers shared by the tests: one version of each, instead of a copy per file.

- :func:`examples`: a Hypothesis example count relative to the loaded profile.
"""

from __future__ import annotations

from hypothesis import settings

# -- Hypothesis ---------------------------------------------------------------------------


def examples(scale: float) -> int:
    """
    ``scale`` times the loaded profile's ``max_examples`` (at least 1), for a test that
    wants more or fewer examples than the others: ``@settings(max_examples=examples(5))``.

    The profiles are in tests/conftest.py; ``ci`` has 60 examples, ``fast`` 15, so
    ``examples(5)`` is 300 in CI and 75 with ``HYPOTHESIS_PROFILE=fast``. Evaluated when
    the test module is imported, after conftest.py has loaded the profile.
    """
    return max(1, round(settings().max_examples * scale))


FIND_LIMIT = 2000
"""How many examples ``hypothesis.find`` may try before it gives up. Not an example count
that the profiles scale: ``find`` stops at the first example that matches, so the limit
is only reached when the strategy cannot produce one (the test's failure)."""
