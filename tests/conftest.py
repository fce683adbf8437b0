"""
Shared test configuration: the Hypothesis profiles (``HYPOTHESIS_PROFILE``; a test that
wants more or fewer examples scales the profile's count with ``tests.helpers.examples``),
and the process marker enforced (``tests/spawn_guard.py``).
"""

import os

from hypothesis import HealthCheck, settings

# default: `python -m pytest` (the README's command) runs what CI runs.
# ci: .ci/run; no example database (each CI run is a fresh clone: it would only write
#     into the checkout), and a failure prints the blob that reproduces it.
# fast: a quick local run, and the version legs of .ci/run.
settings.register_profile(
    "default", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
    database=None,
    print_blob=True,
)
settings.register_profile(
    "fast", deadline=None, max_examples=15, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# A test that starts a child process must carry @pytest.mark.process (tests/spawn_guard.py);
# pytester runs small test files (tests/test_spawn_guard.py).
pytest_plugins = ("tests.spawn_guard", "pytester")
