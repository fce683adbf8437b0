"""
Hooks: configured commands the agent runs at two points of a turn (``docs/how-to/write-hooks.md``).

=================  ==============================================  ==========================
event              when                                            what the hook may do
=================  ==============================================  ==========================
``preToolCall``    a tool call was announced (``tool_call``),      deny it: the call ends
                   before any permission request                   ``failed`` with
                                                                   ``[denied by a hook: …]``
``postAsk``        the turn ended normally (``end_turn``)          replace the final answer
=================  ==============================================  ==========================

A hook is ``command args…`` (no shell), run with Twisted's process API in the session's cwd,
in its own process group.  It reads one JSON object (the event) on stdin and answers with
its exit status and a JSON object on stdout:

- exit 0 and nothing, or ``{}``: no objection (allow the call / keep the answer);
- exit 0 and ``{"decision": "deny", "reason": "…"}`` (``preToolCall``): deny the call;
- exit 0 and ``{"replace": "…"}`` (``postAsk``): the new final answer.

Hooks fail open: a hook that cannot be started, exits with another status, is killed by a
signal, runs longer than its ``timeout`` (its whole process group is killed) or prints
anything but such an object is logged as ``🪝 <event> hook <command> …`` on stderr and
counts as "no objection".
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import ProcessProtocol
from twisted.logger import Logger
from twisted.python.failure import Failure

from acpkit import schema
from acpkit.io import process_group_argv
from acpkit.io.process_groups import child_groups, group_has_live_members
from acpkit.io.process_groups import kill_group as kill_process_group

__all__ = [
    "HOOK_EVENTS",
    "HookCommand",
    "HookDenial",
    "HookOutcome",
    "HookRunner",
    "hook_banner_lines",
    "parse_hooks",
    "run_hook",
]

_log = Logger()

HOOK_EVENTS = ("preToolCall", "postAsk")
DEFAULT_TIMEOUT = 10.0
MAX_STDOUT = 1024 * 1024
MAX_STDERR_TAIL = 4096
KILL_WAIT = 5.0
"""How long to wait for a killed hook's end before giving up on it."""


@attrs.frozen
class HookCommand:
    """One configured hook: ``command args…``, killed after ``timeout`` seconds."""

    command: str
    args: tuple[str, ...] = ()
    timeout: float = DEFAULT_TIMEOUT

    def display(self) -> str:
        """The command as shown in log lines."""
        return " ".join([self.command, *self.args])


def _parse_command(key: str, raw: Any) -> HookCommand:
    if not isinstance(raw, Mapping):
        raise ValueError(f"{key} must be a table (command, args, timeout), not {raw!r}")
    unknown = sorted(set(raw) - {"command", "args", "timeout"})
    if unknown:
        raise ValueError(f"{key}.{unknown[0]} is not a key this file has")
    command = raw.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"{key}.command must be a non-empty string")
    args = raw.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{key}.args must be a list of strings, not {args!r}")
    timeout = raw.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValueError(f"{key}.timeout must be a positive number of seconds, not {timeout!r}")
    return HookCommand(command=command, args=tuple(args), timeout=float(timeout))


def parse_hooks(value: Any) -> dict[str, tuple[HookCommand, ...]]:
    """Validate the ``[hooks]`` table; ``ValueError`` names the key (``hooks.postAsk[1].args``)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"hooks must be a table, not {value!r}")
    hooks: dict[str, tuple[HookCommand, ...]] = {}
    for event, entries in value.items():
        if event not in HOOK_EVENTS:
            raise ValueError(
                f"hooks.{event} is not a key this file has (events: {', '.join(HOOK_EVENTS)})"
            )
        if not isinstance(entries, list):
            raise ValueError(f"hooks.{event} must be an array of tables ([[hooks.{event}]])")
        hooks[event] = tuple(
            _parse_command(f"hooks.{event}[{index}]", entry)
            for index, entry in enumerate(entries, start=1)
        )
    return hooks


def hook_banner_lines(hooks: Mapping[str, Sequence[HookCommand]]) -> list[str]:
    """The banner line of the configured hooks (none when there are none)."""
    parts = [
        f"{event}: {', '.join(hook.display() for hook in hooks[event])}"
        for event in HOOK_EVENTS
        if hooks.get(event)
    ]
    return [f"  hooks:       {'; '.join(parts)}"] if parts else []


@attrs.frozen
class HookOutcome:
    """What one hook run gave: its answer object, or why it gave none (``problem``)."""

    answer: Mapping[str, Any] | None
    problem: str | None = None


class _HookProtocol(ProcessProtocol):
    """Feeds the event on stdin, collects stdout and the tail of stderr."""

    def __init__(self, payload: bytes, ended: Callable[[Failure], None]) -> None:
        self._payload = payload
        self._ended = ended
        self.stdout = bytearray()
        self.stdout_overflow = False
        self.stderr = bytearray()

    def connectionMade(self) -> None:
        assert self.transport is not None
        try:
            self.transport.write(self._payload)
        finally:
            self.transport.closeStdin()

    def outReceived(self, data: bytes) -> None:
        if len(self.stdout) + len(data) > MAX_STDOUT:
            self.stdout_overflow = True
            data = data[: max(0, MAX_STDOUT - len(self.stdout))]
        self.stdout += data

    def errReceived(self, data: bytes) -> None:
        self.stderr += data
        if len(self.stderr) > MAX_STDERR_TAIL:
            del self.stderr[: len(self.stderr) - MAX_STDERR_TAIL]

    def processEnded(self, reason: Failure) -> None:
        self._ended(reason)


def _resolve(command: str, cwd: str, env: Mapping[str, str]) -> str | None:
    if os.sep in command:
        path = os.path.normpath(os.path.join(cwd, os.path.expanduser(command)))
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    found = shutil.which(command, path=env.get("PATH", os.defpath))
    return None if found is None else os.path.abspath(found)


def _last_line(data: bytes) -> str:
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines()]
    lines = [line for line in lines if line]
    return lines[-1][:200] if lines else ""


def run_hook(
    reactor: Any,
    hook: HookCommand,
    payload: Mapping[str, Any],
    cwd: str,
    env: Mapping[str, str] | None = None,
) -> Deferred[HookOutcome]:
    """
    Run one hook on ``payload``; never fails (a problem is in the outcome) except with
    :class:`CancelledError` when cancelled, which kills the hook's process group.
    """
    child_env = dict(os.environ if env is None else env)
    event = str(payload.get("event", ""))
    child_env["ACPKIT_HOOK_EVENT"] = event
    executable = _resolve(hook.command, cwd, child_env)
    state: dict[str, Any] = {"pid": None, "timer": None, "timed_out": False, "killer": None}

    def kill_group() -> None:
        pid = state["pid"]
        if pid is not None:
            kill_process_group(pid, signal.SIGKILL)

    def cancel(_: Deferred[HookOutcome]) -> None:
        stop_timers()
        kill_group()

    result: Deferred[HookOutcome] = Deferred(cancel)

    def stop_timers() -> None:
        for name in ("timer", "killer"):
            call: IDelayedCall | None = state[name]
            if call is not None and call.active():
                call.cancel()
            state[name] = None

    def finish(outcome: HookOutcome) -> None:
        stop_timers()
        if state["pid"] is not None and not group_has_live_members(state["pid"]):
            child_groups.discard(state["pid"])
        if not result.called:
            result.callback(outcome)

    if executable is None:
        finish(HookOutcome(None, "cannot run: not found or not executable"))
        return result
    if not os.path.isdir(cwd):
        finish(HookOutcome(None, f"cannot run: the session directory {cwd} does not exist"))
        return result

    def ended(reason: Failure) -> None:
        if result.called:
            return
        if state["timed_out"]:
            finish(HookOutcome(None, f"timed out after {hook.timeout:g}s: killed"))
            return
        kill_group()  # whatever the hook left running in its group goes too
        value = reason.value
        if isinstance(value, ProcessTerminated) and not isinstance(value, ProcessDone):
            tail = _last_line(bytes(protocol.stderr))
            detail = f": {tail}" if tail else ""
            if value.exitCode is not None:
                finish(HookOutcome(None, f"failed with exit status {value.exitCode}{detail}"))
            else:
                finish(HookOutcome(None, f"was killed by signal {value.signal}{detail}"))
            return
        finish(_parse_answer(bytes(protocol.stdout), protocol.stdout_overflow))

    def expire() -> None:
        state["timer"] = None
        state["timed_out"] = True
        kill_group()

        def give_up() -> None:
            state["killer"] = None
            finish(HookOutcome(None, f"timed out after {hook.timeout:g}s: killed (still ending)"))

        state["killer"] = reactor.callLater(KILL_WAIT, give_up)

    protocol = _HookProtocol(json.dumps(payload).encode("utf-8") + b"\n", ended)
    launcher, argv = process_group_argv(executable, [hook.command, *hook.args])
    try:
        process = reactor.spawnProcess(protocol, launcher, argv, env=child_env, path=cwd)
    except Exception as error:  # fail open, whatever the reactor raises
        finish(HookOutcome(None, f"cannot run: {error}"))
        return result
    state["pid"] = getattr(process, "pid", None)
    if state["pid"] is not None:
        child_groups.add(state["pid"])  # killed at the latest when the agent exits
    state["timer"] = reactor.callLater(hook.timeout, expire)
    return result


def _parse_answer(stdout: bytes, overflow: bool) -> HookOutcome:
    if overflow:
        return HookOutcome(None, f"printed garbage: more than {MAX_STDOUT} bytes on stdout")
    try:
        text = stdout.decode("utf-8").strip()
    except UnicodeDecodeError:
        return HookOutcome(None, "printed garbage: stdout is not UTF-8")
    if not text:
        return HookOutcome({})
    try:
        answer = json.loads(text)
    except ValueError:
        return HookOutcome(None, f"printed garbage (not JSON): {text[:80]!r}")
    if not isinstance(answer, dict):
        return HookOutcome(None, f"printed garbage (not a JSON object): {text[:80]!r}")
    return HookOutcome(answer)


@attrs.frozen
class HookDenial:
    """A ``preToolCall`` hook denied a call."""

    command: str
    reason: str

    @property
    def output(self) -> str:
        """What the model receives (and the call's text content)."""
        return f"[denied by a hook: {self.reason}]"

    def update(self, tool_call_id: str, title: str) -> schema.ToolCallProgress:
        """The ``tool_call_update`` that ends the denied call (status ``failed``)."""
        return schema.ToolCallProgress(
            tool_call_id=tool_call_id,
            status=schema.ToolCallStatus.FAILED,
            title=f"{title} — denied by a hook",
            content=[
                schema.ContentToolCallContent(content=schema.TextContentBlock(text=self.output))
            ],
            raw_output={"output": self.output},
        )


class HookRunner:
    """Runs the configured hooks of one event, in order, for the turn loop."""

    def __init__(
        self,
        hooks: Mapping[str, Sequence[HookCommand]],
        reactor: Any,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.hooks = hooks
        self.reactor = reactor
        self.env = env

    async def _run(
        self, event: str, hook: HookCommand, payload: dict[str, Any], cwd: str
    ) -> Mapping[str, Any] | None:
        outcome = await run_hook(self.reactor, hook, payload, cwd, self.env)
        if outcome.problem is not None:
            _log.warn(
                "🪝 {event} hook {command} {problem}",
                event=event,
                command=hook.display(),
                problem=outcome.problem,
            )
        return outcome.answer

    async def pre_tool_call(
        self,
        *,
        session_id: str,
        cwd: str,
        tool_call_id: str,
        tool: str,
        title: str,
        arguments: Mapping[str, Any],
    ) -> HookDenial | None:
        """Run the ``preToolCall`` hooks; the first denial wins (later hooks do not run)."""
        payload = {
            "event": "preToolCall",
            "sessionId": session_id,
            "cwd": cwd,
            "toolCallId": tool_call_id,
            "tool": tool,
            "title": title,
            "arguments": dict(arguments),
        }
        for hook in self.hooks.get("preToolCall", ()):
            answer = await self._run("preToolCall", hook, payload, cwd)
            if answer is None:
                continue
            decision = answer.get("decision", "allow")
            if decision == "allow":
                continue
            if decision != "deny":
                _log.warn(
                    "🪝 preToolCall hook {command} printed garbage (unknown decision {d!r})",
                    command=hook.display(),
                    d=decision,
                )
                continue
            reason = answer.get("reason")
            if not isinstance(reason, str) or not reason.strip():
                reason = f"no reason given by {hook.command}"
            denial = HookDenial(command=hook.display(), reason=" ".join(reason.split()))
            _log.info(
                "[acp] session {sid}: {title} denied by a hook ({command}): {reason}",
                sid=session_id,
                title=title,
                command=denial.command,
                reason=denial.reason,
            )
            return denial
        return None

    async def post_ask(self, *, session_id: str, cwd: str, prompt: str, answer: str) -> str | None:
        """Run the ``postAsk`` hooks in order (each sees the answer so far); the new answer."""
        current = answer
        replaced = False
        for hook in self.hooks.get("postAsk", ()):
            payload = {
                "event": "postAsk",
                "sessionId": session_id,
                "cwd": cwd,
                "prompt": prompt,
                "answer": current,
            }
            result = await self._run("postAsk", hook, payload, cwd)
            if result is None or "replace" not in result:
                continue
            replacement = result["replace"]
            if not isinstance(replacement, str):
                _log.warn(
                    "🪝 postAsk hook {command} printed garbage (replace is not a string)",
                    command=hook.display(),
                )
                continue
            _log.info(
                "🪝 postAsk: {command} replaced the answer ({old} → {new} characters)",
                command=hook.display(),
                old=len(current),
                new=len(replacement),
            )
            current = replacement
            replaced = True
        return current if replaced else None

    async def finish_answer(
        self,
        session: Any,
        prompt: str,
        send_text: Callable[[str], None],
    ) -> None:
        """
        ``postAsk`` at the end of a turn: the last history message (the model's final
        answer) is replaced by the hooks' answer, and the client receives it as one more
        ``agent_message_chunk``: a blank line, ``🪝 `` and the new answer.
        """
        if not self.hooks.get("postAsk"):
            return
        final = session.history[-1] if session.history else None
        if not isinstance(final, dict) or final.get("role") != "assistant":
            return
        content = final.get("content")
        replacement = await self.post_ask(
            session_id=session.id,
            cwd=session.cwd,
            prompt=prompt,
            answer=content if isinstance(content, str) else "",
        )
        if replacement is None:
            return
        final["content"] = replacement
        send_text(f"\n\n🪝 {replacement}")
