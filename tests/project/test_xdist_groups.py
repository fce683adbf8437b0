"""
tests/conftest.py under pytest-xdist: with ``--dist loadgroup`` the tests of one
``xdist_group`` run on one worker (pytest-xdist 3.8 alone ignores the groups on pytest
9.2: pytest-dev/pytest-xdist#1386), and the heavy tests are handed out first.
"""

from __future__ import annotations

import pytest

pytest.importorskip("xdist")

CONFTEST = """
from tests.conftest import pytest_collection_modifyitems  # noqa: F401
"""

INI = """
[pytest]
markers =
    process: starts real child processes
    real_agent: runs a published third-party agent
    sdist: builds the sdist
"""

GROUPED = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("one")


@pytest.mark.parametrize("n", range(6))
def test_grouped(n):
    with open("workers.txt", "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""

SPREAD = """
import time
import pytest


@pytest.mark.parametrize("n", range(6))
def test_spread(n):
    time.sleep(0.05)
"""


# xdist starts its workers as child processes.
@pytest.mark.process
def test_a_group_runs_on_one_worker(pytester: pytest.Pytester) -> None:
    """Six tests of one group, among others, all run on the same worker."""
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_grouped=GROUPED, test_spread=SPREAD)
    result = pytester.runpytest("-n", "3", "--dist", "loadgroup", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12)
    workers = (pytester.path / "workers.txt").read_text().split()
    assert len(workers) == 6
    assert len(set(workers)) == 1, workers


def test_heavy_tests_are_handed_out_first(pytester: pytest.Pytester) -> None:
    """real_agent and sdist tests come first in the collection, the rest keep their order."""
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(
        test_order=(
            "import pytest\n"
            "def test_a(): pass\n"
            "@pytest.mark.real_agent\n"
            "def test_b(): pass\n"
            "def test_c(): pass\n"
            "@pytest.mark.sdist\n"
            "def test_d(): pass\n"
        )
    )
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "test_order.py::test_b",
            "test_order.py::test_d",
            "test_order.py::test_a",
            "test_order.py::test_c",
        ]
    )
