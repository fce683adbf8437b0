"""
``acpkit-conformance [options] -- AGENT_COMMAND [ARGS…]``: argument parsing, the run, exit codes.

Exit status: 0 when every applicable rule holds, 1 when a rule is violated, 2 when the agent
could not be tested (it does not start, or never answers ``initialize``) or the options are
wrong. `run_suite` is the programmatic entry point (used by the pytest plugin too).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import IO

from twisted.logger import Logger, globalLogBeginner, textFileLogObserver

from acpkit.conformance.machine import (
    PROFILES,
    CannotTest,
    SuiteConfig,
    run_machine,
    run_probes,
)
from acpkit.conformance.observer import Verdicts
from acpkit.conformance.report import FORMATS, SuiteResult, format_report, rule_results
from acpkit.conformance.rules import UnknownRule, select_rules

__all__ = [
    "DEFAULT_MODEL_SCRIPT",
    "MODEL_TOOL_CALLS",
    "main",
    "model_server",
    "parse_arguments",
    "run_suite",
]

_log = Logger(namespace="acpkit.conformance")

#: The tool calls of the script's second turn. Tool names are agent-specific (these are the
#: reference agent's: ``bash``, ``write_file`` / ``read_file`` with a ``path`` relative to the
#: session directory, which go through ``fs/*`` when the client advertised fs, and
#: ``ask_user``, which goes through ``elicitation/create`` when it advertised forms). An agent
#: that does not know a tool reports the call failed or ignores it: no rule counts that
#: against it.
MODEL_TOOL_CALLS: list[dict[str, object]] = [
    {"name": "bash", "arguments": {"command": "echo conformance"}},
    {
        "name": "write_file",
        "arguments": {"path": "conformance.txt", "content": "written by acpkit-conformance\n"},
    },
    {"name": "read_file", "arguments": {"path": "conformance.txt"}},
    {
        "name": "ask_user",
        "arguments": {"questions": [{"question": "Proceed with the test?", "type": "confirm"}]},
    },
]

#: The script `--model-server` plays: text, tool calls, usage, and a slow turn (for cancels).
DEFAULT_MODEL_SCRIPT: dict[str, object] = {
    "loop": True,
    "model": "scripted",
    "context_window": 8192,
    "turn": [
        {
            "chunks": ["Hello", " from", " the scripted", " model."],
            "usage": {"input": 12, "output": 4},
        },
        {
            "chunks": ["Let me look."],
            "tool_calls": MODEL_TOOL_CALLS,
            "usage": {"input": 20, "output": 8},
        },
        {"chunks": ["Done."], "usage": {"input": 30, "output": 2}},
        {
            "chunks": [f"word{n} " for n in range(20)],
            "delay": 0.2,
            "usage": {"input": 5, "output": 20},
        },
    ],
}


@contextmanager
def model_server(timeout: float) -> Iterator[str]:
    """Run ``python -m acpkit.testing.modelserver`` with `DEFAULT_MODEL_SCRIPT`; yield its URL."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(DEFAULT_MODEL_SCRIPT, f)
        script = f.name
    process = subprocess.Popen(
        [sys.executable, "-m", "acpkit.testing.modelserver", script, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        if not url.startswith("http"):
            raise CannotTest(f"the model server did not start (printed {url!r})")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        os.unlink(script)


def run_suite(
    argv: Sequence[str],
    *,
    profile: str = "quick",
    seed: int = 0,
    timeout: float = 10.0,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    only: Sequence[str] = (),
    skip: Sequence[str] = (),
    use_model_server: bool = False,
    explore: bool = True,
) -> SuiteResult:
    """
    Test the agent started by ``argv``: fixed probes, then the state machine (``explore``).

    With ``use_model_server`` a scripted model server runs on loopback; the agent gets
    ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY=test`` and ``{model_url}`` in ``argv`` is replaced.
    Raises `UnknownRule` for a bad selector and `KeyError` for an unknown profile.
    """
    selected = select_rules(only, skip)
    chosen_profile = PROFILES[profile]
    started = time.monotonic()
    replay = _replay_command(argv, profile, seed, timeout, only, skip, use_model_server)
    with _maybe_model_server(use_model_server, timeout) as url:
        environment = dict(os.environ if env is None else env)
        command = list(argv)
        if url is not None:
            environment.update({"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "test"})
            command = [part.replace("{model_url}", url) for part in command]
        config = SuiteConfig(
            argv=tuple(command),
            cwd=cwd,
            env=environment,
            timeout=timeout,
            profile=chosen_profile,
            seed=seed,
            rules=frozenset(r.id for r in selected),
        )
        verdicts = Verdicts()
        steps = transcript = ""
        try:
            run_probes(config, verdicts)
            if explore:
                failure = run_machine(config, verdicts)
                if failure is not None:
                    steps, transcript = failure.steps, failure.transcript
        except CannotTest as e:
            return SuiteResult(
                agent=shlex.join(argv),
                results=(),
                seed=seed,
                profile=profile,
                elapsed=time.monotonic() - started,
                replay=replay,
                error=str(e),
            )
    return SuiteResult(
        agent=shlex.join(argv),
        results=rule_results(verdicts, selected),
        seed=seed,
        profile=profile,
        elapsed=time.monotonic() - started,
        replay=replay,
        machine_steps=steps,
        machine_transcript=transcript,
    )


@contextmanager
def _maybe_model_server(wanted: bool, timeout: float) -> Iterator[str | None]:
    if not wanted:
        yield None
        return
    with model_server(timeout) as url:
        yield url


def _replay_command(
    argv: Sequence[str],
    profile: str,
    seed: int,
    timeout: float,
    only: Sequence[str],
    skip: Sequence[str],
    model: bool,
) -> str:
    parts = ["acpkit-conformance", "--profile", profile, "--seed", str(seed)]
    parts += ["--timeout", f"{timeout:g}"]
    if only:
        parts += ["--rules", ",".join(only)]
    if skip:
        parts += ["--skip", ",".join(skip)]
    if model:
        parts.append("--model-server")
    return shlex.join([*parts, "--", *argv])


def _split(values: Sequence[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="acpkit-conformance",
        description="Property-based ACP conformance testing of an agent run as a command.",
        epilog="Exit status: 0 all applicable rules hold, 1 a rule is violated, 2 cannot test.",
    )
    parser.add_argument("--rules", action="append", default=[], help="rule ids or prefixes")
    parser.add_argument("--skip", action="append", default=[], help="rule ids or prefixes")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="quick")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per step")
    parser.add_argument("--cwd", help="directory to start the agent in")
    parser.add_argument("--report", choices=FORMATS, default="text")
    parser.add_argument("--output", help="write the report to this file (default stdout)")
    parser.add_argument(
        "--model-server", action="store_true", help="run a scripted OpenAI-compatible server"
    )
    parser.add_argument("--env", action="append", default=[], metavar="K=V")
    parser.add_argument("--list-rules", action="store_true", help="print the rule ids and exit")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- AGENT_COMMAND [ARGS...]")
    return parser


def parse_arguments(argv: Sequence[str]) -> argparse.Namespace:
    """Parse the command line; the agent command is in ``command`` (without ``--``)."""
    args = _parser().parse_args(list(argv))
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    args.command = command
    return args


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    """The console script; returns the exit status."""
    stream = sys.stdout if out is None else out
    if argv is None:  # the real command line: log to stderr (tests keep their own logging)
        globalLogBeginner.beginLoggingTo(
            [textFileLogObserver(sys.stderr)], redirectStandardIO=False
        )
    try:
        args = parse_arguments(sys.argv[1:] if argv is None else argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if args.list_rules:
        for rule in select_rules():
            stream.write(f"{rule.id}\t{rule.level}\t{rule.title}\n")
        return 0
    if not args.command:
        sys.stderr.write("acpkit-conformance: give the agent command after --\n")
        return 2
    env = dict(os.environ)
    for pair in args.env:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            sys.stderr.write(f"acpkit-conformance: --env wants K=V, got {pair!r}\n")
            return 2
        env[key] = value
    try:
        result = run_suite(
            args.command,
            profile=args.profile,
            seed=args.seed,
            timeout=args.timeout,
            cwd=args.cwd,
            env=env,
            only=_split(args.rules),
            skip=_split(args.skip),
            use_model_server=args.model_server,
        )
    except UnknownRule as e:
        sys.stderr.write(f"acpkit-conformance: {e}\n")
        return 2
    text = format_report(result, args.report)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
        _log.info("report written to {path}", path=args.output)
        if args.report != "text":
            stream.write(format_report(result, "text"))
    else:
        stream.write(text)
    return result.exit_code
