"""
Shared test configuration (CONTRIBUTING.md, "Test tiers" says how to run each tier):

- the Hypothesis profiles (``HYPOTHESIS_PROFILE``; a test that wants more or fewer
  examples scales the profile's count with ``tests.helpers.examples``);
- a test that starts a child process must carry ``@pytest.mark.process``
  (``tests/spawn_guard.py``, loaded below; ``real_agent`` and ``sdist`` imply it);
- safe under pytest-xdist (``-n N``): trial's ``mktemp`` goes under ``tmp_path`` instead
  of the checkout, Twisted's plugin cache is brought up to date once before the workers
  start, and the heavy tests are handed out first.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from twisted.trial.unittest import SynchronousTestCase

# A test that starts a child process must carry @pytest.mark.process (tests/spawn_guard.py);
# pytester runs small test files (tests/project/test_spawn_guard.py).
pytest_plugins = ("tests.spawn_guard", "pytester")

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

#: The markers of the tests handed out first to the xdist workers (each runs for tens of
#: seconds): started last, one of them would be the whole run's tail.
HEAVY_FIRST = ("real_agent", "sdist")


def pytest_configure(config: pytest.Config) -> None:
    """
    In the process that runs the tests, ``PYTEST_ADDOPTS`` has been read: the pytest runs
    that tests start as child processes must not inherit it (.ci/run passes ``-n``,
    ``--basetemp`` and coverage options through it: a child pytest would start its own
    workers and empty this run's temporary directory). An xdist controller keeps it: its
    workers read it as they start (pytest-cov starts measuring there).

    Before any xdist worker starts: bring Twisted's plugin cache up to date. ``twistd``
    (bob's tests) rewrites ``twisted/plugins/dropin.cache`` when it is stale; several
    workers starting bob at once would write it at the same time.
    """
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did the cache
        os.environ.pop("PYTEST_ADDOPTS", None)
        return
    if not getattr(config.option, "numprocesses", None):  # no workers: tests run here
        os.environ.pop("PYTEST_ADDOPTS", None)
    from twisted.plugin import IPlugin, getPlugins

    list(getPlugins(IPlugin))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The heavy tests (``real_agent``, ``sdist``) first, the rest in file order: with
    xdist the long ones start at once, and the run ends on short tests.

    And, in an xdist worker with ``--dist loadgroup``, each ``xdist_group`` test's node id
    ends with ``@<group>``, which is how the controller keeps a group on one worker.
    pytest-xdist 3.8 writes that suffix into an attribute pytest 9.2 no longer reads, so
    groups are silently ignored (pytest-dev/pytest-xdist#1386); this puts it where pytest
    reads node ids now. It does nothing where xdist's own suffix took (older pytest, a
    fixed xdist).
    """
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in HEAVY_FIRST))
    if hasattr(config, "workerinput") and config.getvalue("loadgroup"):
        for item in items:
            _group_node_id(item)


def _group_node_id(item: pytest.Item) -> None:
    names = sorted(
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    )
    if not names:
        return
    suffix = "@" + "_".join(dict.fromkeys(names))
    if item.nodeid.endswith(suffix) or not hasattr(item, "_id"):
        return
    from _pytest.nodeid import NodeId  # pytest >= 9.2: the structured node id

    item._id = NodeId.parse(item.nodeid + suffix)


@pytest.fixture(autouse=True)
def _trial_mktemp_under_tmp_path(request: pytest.FixtureRequest) -> Iterator[None]:
    """A trial ``TestCase``'s ``self.mktemp()`` gives a path under the test's
    ``tmp_path`` (not under the current directory, the checkout), unique per call."""
    case = request.instance
    if not isinstance(case, SynchronousTestCase):
        yield
        return
    base: Path = request.getfixturevalue("tmp_path")
    counter = itertools.count()

    def mktemp() -> str:
        directory = base / f"mktemp{next(counter)}"
        directory.mkdir()
        return str(directory / "temp")

    case.mktemp = mktemp  # type: ignore[method-assign]
    yield


@pytest.fixture(autouse=True)
def _no_autobahn_timer_left_for_the_next_test() -> Iterator[None]:
    """
    After each test, cancel the calls Autobahn left on txaio's batched timer
    (``tests.helpers.cancel_autobahn_timers``): a trial test that runs next on the same
    worker would otherwise see them as its own dirty reactor.
    """
    yield
    import sys

    if "txaio" in sys.modules:
        from tests.helpers import cancel_autobahn_timers

        cancel_autobahn_timers()
