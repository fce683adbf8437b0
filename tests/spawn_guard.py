"""A pytest plugin: a test that starts a child process must say so with a marker.

Tests that start real child processes are the slow, machine-dependent tier: they carry
``@pytest.mark.process`` so that ``-m "not process"`` leaves them out (CONTRIBUTING.md,
"Test tiers"). ``real_agent`` and ``sdist`` tests start processes by nature: each of
those markers implies ``process`` (the marker is added at collection).

While a test's setup, call and teardown run, this plugin watches every way a Python
process starts another one: ``os.fork``/``forkpty``/``posix_spawn``/``posix_spawnp``,
``os.system``, ``subprocess.Popen`` (which ``subprocess.run``, ``os.popen`` and asyncio's
subprocesses use), ``multiprocessing``'s spawn, and through those ``reactor.spawnProcess``
(Twisted forks or calls ``posix_spawnp``) and ``pexpect`` (``pty.fork``). The child is
started as asked; the test then fails, naming the call and where in the test code it
came from, unless it carries ``process`` (or a marker that implies it).

tests/conftest.py loads it (``pytest_plugins``); tests/project/test_spawn_guard.py tests it.
"""

from __future__ import annotations

import multiprocessing.util
import os
import subprocess
import threading
import traceback
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

PROCESS_MARKERS = ("process", "real_agent", "sdist")
"""A test with any of these markers may start child processes."""

IMPLIES_PROCESS = ("real_agent", "sdist")
"""Markers that imply ``process``: ``-m "not process"`` leaves their tests out too."""

_OS_FUNCTIONS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system")

_lock = threading.Lock()
_watches: list[list[str]] = []
_originals: list[tuple[object, str, object]] = []


def _caller() -> str:
    """Where the spawn came from: the innermost frame in a test file, else the innermost
    frame outside this module, as ``path:line in function``."""
    here = Path(__file__).resolve()
    frames = [f for f in traceback.extract_stack() if Path(f.filename).resolve() != here]
    in_tests = [f for f in frames if Path(f.filename).name.startswith(("test_", "conftest"))]
    frame = (in_tests or frames)[-1]
    return f"{frame.filename}:{frame.lineno} in {frame.name}"


def _record(what: str) -> None:
    with _lock:
        if _watches:
            where = _caller()
            for watch in _watches:
                watch.append(f"{what} (from {where})")


def _wrap(owner: object, name: str, what: str) -> None:
    original = getattr(owner, name, None)
    if original is None:
        return
    call: Callable[..., Any] = original

    def watched(*args: Any, **kwargs: Any) -> Any:
        _record(what)
        return call(*args, **kwargs)

    _originals.append((owner, name, original))
    setattr(owner, name, watched)


def _install() -> None:
    for name in _OS_FUNCTIONS:
        _wrap(os, name, f"os.{name}()")
    # Popen's own start: _posixsubprocess.fork_exec does not go through os.fork.
    _wrap(subprocess.Popen, "_execute_child", "subprocess.Popen()")
    # multiprocessing's "spawn" and "forkserver" start methods call fork_exec too.
    _wrap(multiprocessing.util, "spawnv_passfds", "multiprocessing spawn")


def _uninstall() -> None:
    while _originals:
        owner, name, original = _originals.pop()
        setattr(owner, name, original)


@contextmanager
def watching() -> Iterator[list[str]]:
    """Record, in the list this yields, each child process started inside the block
    (by any thread). Blocks may nest (a pytester run inside a test): each records."""
    watch: list[str] = []
    with _lock:
        if not _watches:
            _install()
        _watches.append(watch)
    try:
        yield watch
    finally:
        with _lock:
            _watches.remove(watch)
            if not _watches:
                _uninstall()


def may_spawn(item: pytest.Item) -> bool:
    """Whether ``item`` is allowed to start child processes."""
    return any(item.get_closest_marker(name) for name in PROCESS_MARKERS)


def pytest_itemcollected(item: pytest.Item) -> None:
    """``real_agent`` and ``sdist`` imply ``process``."""
    if any(item.get_closest_marker(name) for name in IMPLIES_PROCESS):
        if item.get_closest_marker("process") is None:
            item.add_marker("process")


def _guarded(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    if may_spawn(item):
        yield
        return
    with watching() as spawned:
        try:
            yield
        finally:
            if spawned:
                shown = "\n  ".join(dict.fromkeys(spawned))
                # Raised from the hook wrapper: this phase of the test fails with it.
                pytest.fail(
                    f"{item.nodeid} started a child process during its {phase} without "
                    f"@pytest.mark.process (CONTRIBUTING.md, 'Test tiers'):\n  {shown}",
                    pytrace=False,
                )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    yield from _guarded(item, "setup")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    yield from _guarded(item, "call")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield from _guarded(item, "teardown")
