"""Shared test configuration: Hypothesis profiles; the process marker enforced."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "ci", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "fast", deadline=None, max_examples=15, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# A test that starts a child process must carry @pytest.mark.process (tests/spawn_guard.py);
# pytester runs small test files (tests/test_spawn_guard.py).
pytest_plugins = ("tests.spawn_guard", "pytester")
