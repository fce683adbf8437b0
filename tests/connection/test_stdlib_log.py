"""
Standard-library ``logging`` reaches the Twisted log (:mod:`acpkit.stdlib_log`): one event
per record, in the logger's namespace, at the matching level, from the chosen level up;
``run_agent`` installs the bridge at its ``log_level`` (timestamped lines on stderr, INFO
kept at ``info``), and so does bob under twistd (from info up).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.logger import ILogObserver, LogLevel, formatEvent, globalLogPublisher
from zope.interface import implementer

from acpkit.stdlib_log import TwistedLogHandler, bridge_stdlib_logging, twisted_level

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture
def events() -> Iterator[list[dict[str, Any]]]:
    """The Twisted events emitted meanwhile; the root logger restored afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    seen: list[dict[str, Any]] = []

    @implementer(ILogObserver)
    def observe(event: dict[str, Any]) -> None:
        seen.append(event)

    globalLogPublisher.addObserver(observe)
    yield seen
    globalLogPublisher.removeObserver(observe)
    root.handlers[:] = handlers
    root.setLevel(level)


def test_records_become_events_from_the_chosen_level(events: list[dict[str, Any]]) -> None:
    """At ``info``: INFO and above become events in the logger's namespace with their
    level and formatted message; DEBUG is dropped."""
    bridge_stdlib_logging(LogLevel.info)
    lib = logging.getLogger("somelib.http")
    lib.debug("not shown")
    lib.info("GET %s -> %d", "/v1/models", 200)
    lib.warning("slow")
    mine = [e for e in events if e.get("log_namespace") == "somelib.http"]
    assert [(e["log_level"], formatEvent(e)) for e in mine] == [
        (LogLevel.info, "GET /v1/models -> 200"),
        (LogLevel.warn, "slow"),
    ]


def test_an_exception_travels_as_the_events_failure(events: list[dict[str, Any]]) -> None:
    """``logger.exception`` gives an error event carrying the exception as its failure."""
    bridge_stdlib_logging(LogLevel.warn)
    try:
        raise KeyError("model")
    except KeyError:
        logging.getLogger("somelib").exception("request failed")
    (event,) = [e for e in events if e.get("log_namespace") == "somelib"]
    assert event["log_level"] == LogLevel.error
    assert isinstance(event["log_failure"].value, KeyError)


def test_bridging_again_changes_the_level_without_a_second_handler(
    events: list[dict[str, Any]],
) -> None:
    """One handler whatever the calls; the last level wins."""
    bridge_stdlib_logging(LogLevel.warn)
    bridge_stdlib_logging(LogLevel.debug)
    ours = [h for h in logging.getLogger().handlers if isinstance(h, TwistedLogHandler)]
    assert len(ours) == 1
    logging.getLogger("somelib").debug("now shown")
    assert any(e.get("log_namespace") == "somelib" for e in events)


@pytest.mark.parametrize(
    ("levelno", "level"),
    [
        (5, LogLevel.debug),
        (20, LogLevel.info),
        (25, LogLevel.info),
        (30, LogLevel.warn),
        (40, LogLevel.error),
        (50, LogLevel.critical),
    ],
)
def test_level_mapping(levelno: int, level: LogLevel) -> None:
    """Each logging level maps to the Twisted level at or below it."""
    assert twisted_level(levelno) is level


_AGENT = """
import logging
from twisted.logger import LogLevel
from acpkit import run_agent
from acpkit.connection import Agent

class LoggingAgent(Agent):
    def __init__(self, conn):
        logging.getLogger("somelib").info("info from somelib")
        logging.getLogger("somelib").debug("debug from somelib")

run_agent(LoggingAgent, log_level=LogLevel.{level})
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ACPKIT_TRACE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


@pytest.mark.process
@pytest.mark.parametrize("level", ["info", "warn"])
def test_run_agent_bridges_at_its_log_level(tmp_path: Path, level: str) -> None:
    """``run_agent(log_level=info)``: a library's INFO record is a timestamped line of the
    agent's stderr log (DEBUG is not); at the default ``warn`` it is not shown."""
    program = tmp_path / "agent.py"
    program.write_text(_AGENT.format(level=level), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(program)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    line = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* \[somelib#info\] info from somelib$")
    shown = [text for text in done.stderr.splitlines() if line.match(text)]
    assert len(shown) == (1 if level == "info" else 0), done.stderr
    assert "debug from somelib" not in done.stderr


@pytest.mark.process
def test_bob_bridges_from_info(tmp_path: Path) -> None:
    """bob under ``twistd -n acp-agent``: a library's INFO record, logged once the reactor
    runs, is a line of bob's log on stderr; DEBUG is not."""
    code = (
        "import logging\n"
        "from twisted.internet import reactor\n"
        "def log():\n"
        "    logging.getLogger('somelib').info('info from somelib')\n"
        "    logging.getLogger('somelib').debug('debug from somelib')\n"
        "reactor.callWhenRunning(log)\n"
        "from twisted.scripts.twistd import run\n"
        "run()\n"
    )
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", code, "-n", "acp-agent"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**_env(), "HOME": str(home)},
        timeout=60,
        check=False,
    )
    assert "info from somelib" in done.stderr, done.stderr
    assert "debug from somelib" not in done.stderr
