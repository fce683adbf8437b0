"""
tests/spawn_guard.py: a test that starts a child process without ``@pytest.mark.process``
(or ``real_agent``/``sdist``, which imply it) fails, saying what it started and from
where; a marked one passes. Each case runs a small test file in pytester: the tests that
run a spawning inner test start a real (short) child themselves, so they are marked.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests import spawn_guard

INI = """
[pytest]
markers =
    process: starts real child processes
    real_agent: runs a published third-party agent
    sdist: builds the sdist
"""


@pytest.fixture
def guarded(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory whose runs load the guard (as tests/conftest.py does)."""
    pytester.makeini(INI)
    pytester.makeconftest('pytest_plugins = ("tests.spawn_guard",)\n')
    return pytester


SPAWNS = {
    "subprocess.run": (
        "import subprocess, sys\n"
        "def test_spawns():\n"
        "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n",
        "subprocess.Popen()",
    ),
    "os.system": (
        "import os\ndef test_spawns():\n    assert os.system('true') == 0\n",
        "os.system()",
    ),
    "asyncio subprocess": (
        "import asyncio, sys\n"
        "async def child():\n"
        "    process = await asyncio.create_subprocess_exec(sys.executable, '-c', 'pass')\n"
        "    await process.wait()\n"
        "def test_spawns():\n"
        "    asyncio.run(child())\n",
        "subprocess.Popen()",
    ),
    "reactor.spawnProcess": (
        "import os, sys\n"
        "from twisted.internet import reactor\n"
        "from twisted.internet.protocol import ProcessProtocol\n"
        "def test_spawns():\n"
        "    process = reactor.spawnProcess(\n"
        "        ProcessProtocol(), sys.executable, [sys.executable, '-c', 'pass'], env={}\n"
        "    )\n"
        "    os.waitpid(process.pid, 0)\n",
        "os.",
    ),
    "pty.fork (pexpect)": (
        "import os, pty\n"
        "def test_spawns():\n"
        "    pid, fd = pty.fork()\n"
        "    if pid == 0:\n"
        "        os._exit(0)\n"
        "    os.waitpid(pid, 0)\n"
        "    os.close(fd)\n",
        "os.forkpty()",
    ),
}


@pytest.mark.process
@pytest.mark.parametrize("way", sorted(SPAWNS))
def test_an_unmarked_test_that_spawns_fails(guarded: pytest.Pytester, way: str) -> None:
    """Each way of starting a child, in an unmarked test, fails that test with a message
    naming the test, the call that started the child and the line in the test file."""
    source, call = SPAWNS[way]
    guarded.makepyfile(test_child=source)
    result = guarded.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_child.py::test_spawns started a child process during its call without "
            "@pytest.mark.process*",
            f"*{call}* (from *test_child.py:* in *",
        ]
    )


@pytest.mark.process
@pytest.mark.parametrize("marker", ["process", "real_agent", "sdist"])
def test_a_marked_test_may_spawn(guarded: pytest.Pytester, marker: str) -> None:
    """A test carrying process, real_agent or sdist starts its child and passes."""
    guarded.makepyfile(
        test_child=(
            "import subprocess, sys\nimport pytest\n"
            f"@pytest.mark.{marker}\n"
            "def test_spawns():\n"
            "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
        )
    )
    guarded.runpytest().assert_outcomes(passed=1)


@pytest.mark.process
def test_a_module_mark_covers_its_tests_and_fixtures(guarded: pytest.Pytester) -> None:
    """``pytestmark = pytest.mark.process`` covers every test of the module, with the
    fixtures they use."""
    guarded.makepyfile(
        test_child=(
            "import subprocess, sys\nimport pytest\n"
            "pytestmark = pytest.mark.process\n"
            "@pytest.fixture\n"
            "def child():\n"
            "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
            "def test_uses(child):\n"
            "    pass\n"
        )
    )
    guarded.runpytest().assert_outcomes(passed=1)


@pytest.mark.process
def test_a_spawn_in_a_fixture_fails_the_setup(guarded: pytest.Pytester) -> None:
    """A child started by a fixture of an unmarked test is reported in its setup."""
    guarded.makepyfile(
        test_child=(
            "import subprocess, sys\nimport pytest\n"
            "@pytest.fixture\n"
            "def child():\n"
            "    subprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
            "def test_uses(child):\n"
            "    pass\n"
        )
    )
    result = guarded.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_uses started a child process during its setup*"])


def test_real_agent_and_sdist_imply_process(guarded: pytest.Pytester) -> None:
    """``-m "not process"`` leaves out the real_agent and sdist tests too."""
    guarded.makepyfile(
        test_child=(
            "import pytest\n"
            "@pytest.mark.real_agent\n"
            "def test_agent(): pass\n"
            "@pytest.mark.sdist\n"
            "def test_sdist(): pass\n"
            "def test_plain(): pass\n"
        )
    )
    result = guarded.runpytest("-m", "not process", "-v")
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.fnmatch_lines(["*test_plain PASSED*"])


def test_a_test_that_spawns_nothing_passes(guarded: pytest.Pytester) -> None:
    """An unmarked test that starts nothing passes."""
    guarded.makepyfile(test_child="def test_nothing():\n    assert 1 + 1 == 2\n")
    guarded.runpytest().assert_outcomes(passed=1)


# Marked so that the guard does not watch this test itself: it checks the functions as
# they are outside every watch.
@pytest.mark.process
def test_the_watch_is_undone_when_the_last_one_ends() -> None:
    """os.fork and Popen are wrapped while a watch is open (watches nest), and are
    Python's own again once the last one closes."""
    fork, execute = os.fork, subprocess.Popen._execute_child  # type: ignore[attr-defined]
    with spawn_guard.watching() as outer:
        assert os.fork is not fork
        with spawn_guard.watching() as inner:
            assert os.fork is not fork
        assert os.fork is not fork
    assert (outer, inner) == ([], [])
    assert os.fork is fork
    assert subprocess.Popen._execute_child is execute  # type: ignore[attr-defined]
