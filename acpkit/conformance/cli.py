"""
``acpkit-conformance [options] -- AGENT_COMMAND [ARGS…]``: argument parsing, the run, exit codes.

Exit status: 0 when no MUST rule is violated (SHOULD findings are warnings), 1 when a MUST
rule is violated, a baseline entry is stale, or a SHOULD rule is violated under ``--strict``;
2 when the agent could not be tested (it does not start, never answers ``initialize``, or
nothing could be judged within the step timeout), when the tester itself failed, or when the
options are wrong. A tester failure is never exit 1. `run_suite` is the programmatic entry
point (used by the pytest plugin too).
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import IO, Any, Protocol

import attrs
from twisted.logger import Logger, globalLogBeginner, textFileLogObserver

from acpkit.conformance.baseline import BaselineError, load_baseline
from acpkit.conformance.discovery import discover
from acpkit.conformance.harness import PROFILES, CannotTest, SuiteConfig
from acpkit.conformance.machine import ExplorationRun, start_machine
from acpkit.conformance.observer import Verdicts
from acpkit.conformance.probes import run_probes
from acpkit.conformance.probes_transport import check_tls
from acpkit.conformance.report import (
    FORMATS,
    ExploredFailure,
    SuiteResult,
    format_report,
    rule_results,
)
from acpkit.conformance.rules import UnknownRule, select_rules, split_selectors
from acpkit.conformance.scenarios import (
    ScenarioError,
    Stimuli,
    load_scenarios,
    parse_scenarios_table,
)
from acpkit.conformance.tls import INSECURE_TLS_VARIABLE, TLSSettings

__all__ = [
    "ModelServer",
    "main",
    "parse_arguments",
    "run_suite",
]

_log = Logger(namespace="acpkit.conformance")


class ModelServer(Protocol):
    """What the run needs of the conformance model server (`acpkit.conformance.model`)."""

    def env(self) -> dict[str, str]:
        """The base-URL and key variables of every model API it speaks."""

    def placeholders(self) -> dict[str, str]:
        """``{model_url}``-style names for the agent's command line."""

    def requests(self) -> list[dict[str, Any]]:
        """The model requests it answered so far (api, scenario, tools by role)."""


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
    url: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    tls: TLSSettings | None = None,
    strict: bool = False,
    expected_failures: str | os.PathLike[str] | Mapping[str, str] | None = None,
    scenarios: str | os.PathLike[str] | Mapping[str, str] | None = None,
    discovery: str = "auto",
    progress: Callable[[str], None] | None = None,
    replay_env: Sequence[str] = (),
) -> SuiteResult:
    """
    Test the agent started by ``argv``: fixed probes, then the explorer (``explore``).

    SHOULD findings are warnings: they make the exit status 1 only with ``strict``.
    ``expected_failures`` is a baseline of accepted findings (rule id -> reason, or the path
    of a baseline file, see `acpkit.conformance.baseline`): their findings are ``xfail``, and
    a listed rule that holds is a stale entry that fails the run. A baseline file that
    cannot be used raises `acpkit.conformance.baseline.BaselineError`.

    ``scenarios`` gives the prompts that make the agent do each behaviour (behaviour ->
    prompt, or the path of a scenario file, see `acpkit.conformance.scenarios`; a file that
    cannot be used raises `acpkit.conformance.scenarios.ScenarioError`). ``discovery``
    (``auto``, ``on``, ``off``) tries the commands the agent advertises to learn more
    (`acpkit.conformance.discovery`); ``auto`` does unless a model server drives the turns.
    ``progress`` is called with a line of text as the run goes (the command line writes them
    on stderr). ``replay_env`` names the environment variables the user set for the agent
    (``--env``): the replay lines take them from the shell (``--env NAME="$NAME"``).

    With ``use_model_server`` a conformance model server runs on loopback: the agent's
    environment gets the base URL and key variables of every model API it speaks, and
    ``{model_url}``-style placeholders in ``argv`` are replaced. Never raises for the agent's
    sake: an agent that cannot be tested, or a failure of the tester itself, is a result with
    ``error`` set (exit status 2). Raises `UnknownRule` for a bad selector and `KeyError` for
    an unknown profile.

    With ``url`` (``ws://``, ``wss://``, ``http://``, ``https://``) the agent is reached
    there instead of started, ``headers`` go with every request and ``argv`` is ignored;
    the process-level rules are reported not applicable with the reason. ``tls`` (the
    trust root and client certificate) is used by every ``https://`` / ``wss://``
    connection; without it the system's trust store, or no verification at all when
    ``ACPKIT_CONFORMANCE_INSECURE_TLS=1`` is set. A TLS handshake the agent refuses, or
    whose certificate is not trusted, is a result with ``error`` set that says so.
    """
    if tls is None:
        tls = TLSSettings(insecure=os.environ.get(INSECURE_TLS_VARIABLE) == "1")
    selected = select_rules(only, skip)
    chosen_profile = PROFILES[profile]
    scenario_path: str | None = None
    if scenarios is None:
        given = Stimuli()
    elif isinstance(scenarios, Mapping):
        given = parse_scenarios_table(scenarios)
    else:
        scenario_path = os.fspath(scenarios)
        given = load_scenarios(scenario_path)
    if discovery not in ("auto", "on", "off"):
        raise ValueError(f"discovery must be auto, on or off, not {discovery!r}")
    discover_commands = discovery == "on" or (discovery == "auto" and not use_model_server)

    def say(line: str) -> None:
        if progress is not None:
            progress(line)

    baseline_path: str | None = None
    if expected_failures is None:
        expected: dict[str, str] = {}
    elif isinstance(expected_failures, Mapping):
        expected = dict(expected_failures)
    else:
        baseline_path = os.fspath(expected_failures)
        expected = load_baseline(baseline_path)
    started = time.monotonic()
    replay_for = functools.partial(
        _replay_command,
        argv,
        profile,
        seed,
        timeout,
        model=use_model_server,
        url=url,
        headers=headers,
        tls=tls,
        strict=strict,
        baseline=baseline_path,
        scenarios=scenario_path,
        discovery=discovery,
        cwd=cwd,
        env_names=replay_env,
    )
    replay = replay_for(only, skip)
    notes: list[str] = []
    agent_name = shlex.join(argv)
    transport = "stdio"
    if url is not None:
        from acpkit.conformance.wire import RemoteURL

        remote = RemoteURL.parse(url)
        agent_name = remote.display()
        transport = "websocket" if remote.websocket else ("https" if remote.secure else "http")
        if headers:
            notes.append("headers sent: " + ", ".join(sorted({n for n, _ in headers})))

    def failed(error: str) -> SuiteResult:
        return SuiteResult(
            agent=agent_name,
            results=(),
            seed=seed,
            profile=profile,
            elapsed=time.monotonic() - started,
            replay=replay,
            error=error,
            timeout=timeout,
            strict=strict,
            transport=transport,
        )

    verdicts = Verdicts()
    explored: tuple[ExploredFailure, ...] = ()
    try:
        with _maybe_model_server(use_model_server, timeout) as model:
            environment = dict(os.environ if env is None else env)
            command = list(argv)
            if model is not None:
                environment.update(model.env())
                for name, value in model.placeholders().items():
                    command = [part.replace("{" + name + "}", value) for part in command]
            config = SuiteConfig(
                argv=tuple(command),
                cwd=cwd,
                env=environment,
                timeout=timeout,
                profile=chosen_profile,
                seed=seed,
                rules=frozenset(r.id for r in selected),
                model=model is not None,
                url=url,
                headers=tuple(headers),
                tls=tls,
                scenarios=given,
                model_tool_calls=_tool_calls_of(model) if model is not None else None,
            )
            check_tls(config)

            def prepare(before: SuiteConfig, lane_verdicts: Verdicts) -> SuiteConfig:
                """Discovery, in the probe lane that learns the stimuli."""
                after = before
                if discover_commands:
                    discovery_started = time.monotonic()
                    say("discovery: trying the agent's commands")
                    learned = discover(before, lane_verdicts, [])
                    after = attrs.evolve(before, discovered=learned.stimuli)
                    spent = time.monotonic() - discovery_started
                    notes.append(f"{learned.note} ({spent:.1f}s)")
                    say(f"discovery: {len(learned.behaviours)} command(s) tried ({spent:.1f}s)")
                if after.scenarios or after.discovered:
                    notes.append("stimuli: " + after.scenarios.merged(after.discovered).describe())
                if explore:
                    # the examples run beside the probes, on agents of their own; their
                    # verdicts are merged after the probes' (finish), as if run after them
                    examples = chosen_profile.examples
                    say(f"exploration: up to {examples} example(s), beside the probes")
                    exploring.append(start_machine(after))
                return after

            probes_started = time.monotonic()
            exploring: list[ExplorationRun] = []
            say("fixed probes: in lanes at the same time")
            try:
                _, config = run_probes(config, verdicts, prepare=prepare, progress=say)
            except BaseException:
                for run in exploring:  # its agents end with its examples
                    run.wait()
                raise
            probes_done = time.monotonic()
            notes.append(f"fixed probes took {probes_done - probes_started:.1f}s")
            if explore:
                if not exploring:  # no lane prepared (a selection without probe groups)
                    exploring.append(start_machine(config))
                exploration = exploring[0].finish(verdicts)
                notes.append(
                    f"exploration ran beside the probes and ended "
                    f"{max(0.0, time.monotonic() - probes_done):.1f}s after them "
                    f"({exploration.examples} example(s))"
                )
                explored = exploration.failures
                if exploration.note:
                    notes.append(exploration.note)
            if model is not None:
                notes.append(_model_summary(model.requests()))
    except CannotTest as e:
        return failed(str(e))
    except Exception:
        _log.failure("the conformance tester failed")
        return failed(
            "the conformance tester itself failed (not a finding about the agent):\n"
            + traceback.format_exc()
        )
    results = rule_results(verdicts, selected, expected=expected)
    return SuiteResult(
        agent=agent_name,
        results=results,
        replays={r.rule.id: replay_for([r.rule.id], ()) for r in results if r.found},
        seed=seed,
        profile=profile,
        elapsed=time.monotonic() - started,
        replay=replay,
        explored=explored,
        timeout=timeout,
        notes=tuple(notes),
        strict=strict,
        transport=transport,
    )


def _progress(line: str) -> None:
    """A progress line on stderr."""
    sys.stderr.write(f"acpkit-conformance: {line}\n")
    sys.stderr.flush()


def _tool_calls_of(model: ModelServer) -> Callable[[str], int]:
    """
    How many of the tool calls the model asked for under a directive token the agent ran
    (TOOL-004): their results came back to the model in a later request.  A call the
    model answered to a side task of the agent (a title, a summary: the same conversation,
    its answer ignored) is asked for but never run, and not counted.
    """
    from acpkit.conformance.model import CALL_ID_PREFIX

    def count(token: str) -> int:
        prefix = f"{CALL_ID_PREFIX}{token}_"
        ran = {
            str(call_id)
            for r in model.requests()
            for call_id in _list(r.get("results"))
            if str(call_id).startswith(prefix)
        }
        return len(ran)

    return count


def _list(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else []


def _model_summary(requests: Sequence[Mapping[str, object]]) -> str:
    if not requests:
        return "the model server received no request: the agent never called a model"
    apis = sorted({str(r.get("api")) for r in requests})
    tools = sorted({str(name) for r in requests for name in _names(r.get("roles"))})
    called = f"; tools it called by role: {', '.join(tools)}" if tools else "; it called no tool"
    return f"the model server answered {len(requests)} request(s) ({', '.join(apis)}){called}"


def _names(roles: object) -> list[str]:
    if not isinstance(roles, Mapping):
        return []
    return [f"{role}={name}" for role, name in roles.items()]


@contextmanager
def _maybe_model_server(wanted: bool, timeout: float) -> Iterator[ModelServer | None]:
    if not wanted:
        yield None
        return
    from acpkit.conformance.model import serve_conformance_model

    with serve_conformance_model() as server:
        yield server


def _replay_command(
    argv: Sequence[str],
    profile: str,
    seed: int,
    timeout: float,
    only: Sequence[str],
    skip: Sequence[str],
    *,
    model: bool = False,
    url: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    tls: TLSSettings | None = None,
    strict: bool = False,
    baseline: str | None = None,
    scenarios: str | None = None,
    discovery: str = "auto",
    cwd: str | None = None,
    env_names: Sequence[str] = (),
) -> str:
    """The command line that replays a run (``only``: the rules it judges)."""
    parts = ["acpkit-conformance", "--profile", profile, "--seed", str(seed)]
    parts += ["--timeout", f"{timeout:g}"]
    if strict:
        parts.append("--strict")
    if baseline is not None:
        parts += ["--expected-failures", baseline]
    if scenarios is not None:
        parts += ["--scenarios", scenarios]
    if discovery != "auto":
        parts += ["--discovery", discovery]
    if only:
        parts += ["--rules", ",".join(only)]
    if skip:
        parts += ["--skip", ",".join(skip)]
    if model:
        parts.append("--model-server")
    if cwd is not None:
        parts += ["--cwd", cwd]
    # values may be secrets: taken from the replaying shell's environment
    env = "".join(f' --env {name}="${name}"' for name in sorted(set(env_names)))
    if url is not None:
        from acpkit.conformance.wire import RemoteURL

        parts += ["--url", RemoteURL.parse(url).display()]
        # header values may be tokens: only their names, for the user to fill in
        for name in sorted({n for n, _ in headers}):
            parts += ["--header", f"{name}:…"]
        if tls is not None:
            for option, path in (
                ("--tls-trust-root", tls.trust_root),
                ("--tls-certificate", tls.certificate),
                ("--tls-private-key", tls.private_key),
            ):
                if path is not None:
                    parts += [option, path]
        return shlex.join(parts) + env
    return shlex.join(parts) + env + " -- " + shlex.join(argv)


def _parser() -> argparse.ArgumentParser:
    from acpkit import __version__

    parser = argparse.ArgumentParser(
        prog="acpkit-conformance",
        description="Property-based ACP conformance testing of an agent run as a command "
        "(or reached by --url).",
        epilog="Exit status: 0 no MUST rule violated (SHOULD findings are warnings); 1 a MUST "
        "rule violated, a stale --expected-failures entry, or a warning under --strict; 2 "
        "cannot test (the agent did not start, nothing could be judged in time, the tester "
        "failed, or the options are wrong).",
    )
    parser.add_argument("--version", action="version", version=f"acpkit-conformance {__version__}")
    parser.add_argument(
        "--rules",
        action="append",
        default=[],
        metavar="IDS",
        help="judge only these rule ids or id prefixes (comma separated, repeatable; "
        "e.g. FRAME,RPC-003)",
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="IDS",
        help="do not judge these rule ids or id prefixes (comma separated, repeatable)",
    )
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="quick",
        help="how much to explore: smoke (seconds), quick (default, under a minute), full "
        "(minutes; 16 MiB lines)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="the explorer's random seed (default 0)"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long each step waits for the agent (default 10); a step over it is "
        "'could not judge', never a finding",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="SHOULD findings (warnings) fail the run too (exit 1)",
    )
    parser.add_argument(
        "--expected-failures",
        metavar="FILE",
        help="a TOML baseline of accepted findings ([expected-failures] RULE-ID = "
        '"reason"): they do not fail the run; an entry whose rule holds is stale and does',
    )
    parser.add_argument(
        "--scenarios",
        metavar="FILE",
        help="a TOML file of prompts that make the agent do each behaviour the rules need "
        "(a long turn, a permission request, a tool call, a file read...), for agents whose "
        "behaviours cannot be discovered",
    )
    parser.add_argument(
        "--discovery",
        choices=("auto", "on", "off"),
        default="auto",
        help="try the agent's advertised commands to learn what each does and use them as "
        "stimuli (auto: unless --model-server drives the turns)",
    )
    parser.add_argument(
        "--cwd", metavar="DIR", help="directory to start the agent in (default: the current one)"
    )
    parser.add_argument(
        "--report",
        choices=FORMATS,
        default="text",
        help="report format: text (default), json or junit",
    )
    parser.add_argument(
        "--output",
        metavar="FILE",
        help="write the report to this file (the text report still goes to stdout)",
    )
    parser.add_argument(
        "--model-server",
        action="store_true",
        help="run the conformance model on loopback (OpenAI chat and Responses, Anthropic, "
        "Gemini) and point the agent at it",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="set an environment variable for the agent (repeatable)",
    )
    parser.add_argument(
        "--url",
        help="test the remote agent at this ws://, wss://, http:// or https:// URL instead of "
        "starting a command",
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="a header sent on every request to --url (repeatable; values never reported)",
    )
    parser.add_argument(
        "--tls-trust-root",
        metavar="FILE",
        help="PEM file of the certificate authorities trusted for an https:// or wss:// "
        "--url (instead of the system's)",
    )
    parser.add_argument(
        "--tls-certificate",
        metavar="FILE",
        help="PEM client certificate presented to an https:// or wss:// --url that "
        "requires one (its key may be in the same file)",
    )
    parser.add_argument(
        "--tls-private-key", metavar="FILE", help="PEM private key of --tls-certificate"
    )
    parser.add_argument(
        "--show-all",
        action="store_true",
        help="list in the text report the rules that never apply over the agent's transport too",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress lines on stderr while the run goes",
    )
    parser.add_argument("--list-rules", action="store_true", help="print the rule ids and exit")
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="-- AGENT_COMMAND [ARGS...]: the agent to start (after --)",
    )
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
    if args.url is not None and args.command:
        sys.stderr.write("acpkit-conformance: give either --url or an agent command, not both\n")
        return 2
    if args.url is None and not args.command:
        sys.stderr.write("acpkit-conformance: give the agent command after -- (or --url)\n")
        return 2
    headers: list[tuple[str, str]] = []
    for pair in args.header:
        name, sep, value = pair.partition(":")
        if not sep or not name.strip():
            sys.stderr.write(f"acpkit-conformance: --header wants NAME:VALUE, got {name!r}:…\n")
            return 2
        headers.append((name.strip(), value.strip()))
    tls = TLSSettings(
        trust_root=args.tls_trust_root,
        certificate=args.tls_certificate,
        private_key=args.tls_private_key,
        insecure=os.environ.get(INSECURE_TLS_VARIABLE) == "1",
    )
    if args.url is not None:
        from acpkit.conformance.wire import RemoteURL

        try:
            secure = RemoteURL.parse(args.url).secure
        except ValueError as e:
            sys.stderr.write(f"acpkit-conformance: --url: {e}\n")
            return 2
    else:
        secure = False
    problem = tls.usage_problem(secure)
    if problem is not None:
        sys.stderr.write(f"acpkit-conformance: {problem}\n")
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
            only=split_selectors(args.rules),
            skip=split_selectors(args.skip),
            use_model_server=args.model_server,
            url=args.url,
            headers=headers,
            tls=tls,
            strict=args.strict,
            expected_failures=args.expected_failures,
            scenarios=args.scenarios,
            discovery=args.discovery,
            progress=None if args.quiet else _progress,
            replay_env=[pair.partition("=")[0] for pair in args.env],
        )
    except (UnknownRule, BaselineError, ScenarioError) as e:
        sys.stderr.write(f"acpkit-conformance: {e}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("acpkit-conformance: interrupted\n")
        return 130
    except Exception as e:  # run_suite reports its own failures; this is a last resort
        sys.stderr.write(f"acpkit-conformance: the tester failed: {e!r}\n")
        return 2
    text = format_report(result, args.report, show_all=args.show_all)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            sys.stderr.write(f"acpkit-conformance: cannot write the report: {e}\n")
            stream.write(format_report(result, "text", show_all=args.show_all))
            return 2
        _log.info("report written to {path}", path=args.output)
        if args.report != "text":
            stream.write(format_report(result, "text", show_all=args.show_all))
    else:
        stream.write(text)
    return result.exit_code
