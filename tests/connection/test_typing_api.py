"""
The public API's types, checked the way a user's code is: ``mypy --strict`` (the
project's configuration, pyproject.toml) over small programs written against acpkit.

One mypy run checks every snippet (``mypy.api.run``); its cache lives in the system's
temporary directory, so a second run takes seconds.
"""

from __future__ import annotations

import os
import re
import tempfile
import textwrap
from pathlib import Path

import pytest

# One xdist worker runs this file's tests: its module-scoped fixture (one mypy run over
# every snippet) then runs once, not once per worker.
pytestmark = pytest.mark.xdist_group("typing_api")

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parent.parent.parent

#: Snippet file name → source.  ``ok_*`` must type-check; the others name the errors
#: they must produce in ``EXPECTED_ERRORS``.
SNIPPETS: dict[str, str] = {
    "ok_agent.py": """
        from twisted.internet.defer import Deferred, succeed
        from acpkit import builders, schema
        from acpkit.connection import Agent, AgentConnection, negotiate_version

        class GoodAgent(Agent):
            def __init__(self, conn: AgentConnection) -> None:
                self.conn = conn

            def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
                return schema.InitializeResponse(
                    protocol_version=negotiate_version(params.protocol_version)
                )

            def new_session(
                self, params: schema.NewSessionRequest
            ) -> Deferred[schema.NewSessionResponse]:
                return succeed(schema.NewSessionResponse(session_id="s1"))

            def set_mode(self, params: schema.SetSessionModeRequest) -> None:
                return None  # an empty answer: every field of the result is optional

            async def prompt(self, params: schema.PromptRequest) -> schema.PromptResponse:
                await self.conn.session_update(params.session_id, builders.agent_message("hi"))
                read = await self.conn.read_text_file(
                    schema.ReadTextFileRequest(session_id=params.session_id, path="/a")
                )
                reveal_type(read)
                return schema.PromptResponse(stop_reason=schema.StopReason.END_TURN)

        AgentConnection(GoodAgent)
    """,
    "ok_client.py": """
        from acpkit import schema
        from acpkit.connection import Client, ClientConnection

        class GoodClient(Client):
            async def session_update(self, params: schema.SessionNotification) -> None:
                print(params.update)

            def read_text_file(
                self, params: schema.ReadTextFileRequest
            ) -> schema.ReadTextFileResponse:
                return schema.ReadTextFileResponse(content="")

        async def main(conn: ClientConnection) -> None:
            response = await conn.prompt(schema.PromptRequest(session_id="s", prompt=[]))
            reveal_type(response)

        ClientConnection(GoodClient())
    """,
    "ok_closed.py": """
        from acpkit.connection import AgentConnection

        def watch(conn: AgentConnection) -> None:
            reveal_type(conn.protocol.when_closed())
            reveal_type(conn.closed)
    """,
    "bad_prompt_str.py": """
        from zope.interface import implementer
        from acpkit import schema
        from acpkit.connection import Agent
        from acpkit.interfaces import IAgent

        class StrAgent(Agent):
            async def prompt(self, params: schema.PromptRequest) -> str:
                return "done"

        @implementer(IAgent)
        class StrAgentNoBase:
            def prompt(self, params: schema.PromptRequest) -> str:
                return "done"
    """,
    "bad_client.py": """
        from acpkit import schema
        from acpkit.connection import Client

        class TextClient(Client):
            def read_text_file(self, params: schema.ReadTextFileRequest) -> str:
                return "the content"

            async def request_permission(
                self, params: schema.RequestPermissionRequest
            ) -> schema.RequestPermissionOutcome:
                return schema.CancelledPermissionOutcome()
    """,
    "bad_session_update.py": """
        from acpkit import builders, schema
        from acpkit.connection import AgentConnection

        def send(conn: AgentConnection) -> None:
            conn.session_update(
                "s", schema.SessionNotification(session_id="s", update=builders.agent_message("hi"))
            )
    """,
}

#: Snippet file → the mypy error codes it must produce (each at least once).
EXPECTED_ERRORS: dict[str, set[str]] = {
    "bad_prompt_str.py": {"override"},
    "bad_session_update.py": {"arg-type"},
    "bad_client.py": {"override"},
}

_LINE = re.compile(r"^(?P<file>[^:]+\.py):(?P<line>\d+): (?P<kind>error|note): (?P<text>.*)$")


def _cache_dir() -> str:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(tempfile.gettempdir(), f"acpkit-tests-mypy-cache-{uid}")


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[str, str]]]:
    """Each snippet's (kind, text) lines from one mypy run over all of them."""
    where = tmp_path_factory.mktemp("typing_snippets")
    paths = []
    for name, source in SNIPPETS.items():
        path = where / name
        path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
        paths.append(str(path))
    # From the checkout's root, as `python -m mypy` runs: an editable install's import
    # hook is invisible to mypy, the working directory is not.
    here = os.getcwd()
    os.chdir(ROOT)
    try:
        stdout, stderr, _status = mypy_api.run(
            [
                "--config-file",
                str(ROOT / "pyproject.toml"),
                "--cache-dir",
                _cache_dir(),
                "--no-error-summary",
                "--show-error-codes",
                "--hide-error-context",
                # Errors in acpkit itself are `python -m mypy`'s to report, not this test's.
                "--follow-imports=silent",
                *paths,
            ]
        )
    finally:
        os.chdir(here)
    assert not stderr.strip(), stderr
    found: dict[str, list[tuple[str, str]]] = {name: [] for name in SNIPPETS}
    for line in stdout.splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        name = Path(m["file"]).name
        assert name in found, f"mypy reported on a file that is not a snippet: {line}"
        found[name].append((m["kind"], m["text"]))
    return found


def _errors(lines: list[tuple[str, str]]) -> list[str]:
    return [text for kind, text in lines if kind == "error"]


def _code(error: str) -> str:
    m = re.search(r"\[([a-z-]+)\]$", error)
    return m[1] if m else ""


def _revealed(lines: list[tuple[str, str]]) -> list[str]:
    return [text for kind, text in lines if text.startswith("Revealed type is")]


def test_correct_agent_and_client_type_check(
    mypy_output: dict[str, list[tuple[str, str]]],
) -> None:
    """An agent and a client written as the docs say pass mypy --strict: handlers return
    results, Deferreds of them, coroutines of them, or None for an all-optional result."""
    assert _errors(mypy_output["ok_agent.py"]) == []
    assert _errors(mypy_output["ok_client.py"]) == []


def test_awaited_calls_have_the_result_type(
    mypy_output: dict[str, list[tuple[str, str]]],
) -> None:
    """``await conn.read_text_file(...)`` is a ReadTextFileResponse and ``await
    conn.prompt(...)`` a PromptResponse, for the type checker too."""
    assert _revealed(mypy_output["ok_agent.py"]) == [
        'Revealed type is "acpkit.schema.ReadTextFileResponse"'
    ]
    assert _revealed(mypy_output["ok_client.py"]) == [
        'Revealed type is "acpkit.schema.PromptResponse"'
    ]


def test_close_deferreds_say_what_they_fire_with(
    mypy_output: dict[str, list[tuple[str, str]]],
) -> None:
    """``protocol.when_closed()`` never succeeds (it fails with the reason, even on a
    clean close): ``Deferred[Never]``; the connection's ``closed`` fires with None."""
    assert _errors(mypy_output["ok_closed.py"]) == []
    assert _revealed(mypy_output["ok_closed.py"]) == [
        'Revealed type is "twisted.internet.defer.Deferred[Never]"',
        'Revealed type is "twisted.internet.defer.Deferred[None]"',
    ]


def test_prompt_returning_str_fails(mypy_output: dict[str, list[tuple[str, str]]]) -> None:
    """A ``prompt`` that returns ``str`` is refused, in an Agent subclass and in a class
    that only declares ``@implementer(IAgent)``."""
    errors = _errors(mypy_output["bad_prompt_str.py"])
    assert any(
        '"prompt" incompatible' in e and "acpkit.connection.agent.Agent" in e for e in errors
    ), errors
    assert any('"StrAgentNoBase"' in e and '"IAgent"' in e for e in errors), errors
    # (mypy-zope also says which IAgent methods StrAgentNoBase lacks: [misc].)
    overrides = [e for e in errors if _code(e) in EXPECTED_ERRORS["bad_prompt_str.py"]]
    assert len(overrides) == 2 and all('"prompt"' in e for e in overrides), errors


def test_client_methods_returning_something_else_fail(
    mypy_output: dict[str, list[tuple[str, str]]],
) -> None:
    """A client's ``read_text_file`` returning ``str``, or ``request_permission`` returning
    the outcome instead of the response, is refused."""
    errors = _errors(mypy_output["bad_client.py"])
    assert len(errors) == 2, errors
    assert all(_code(e) in EXPECTED_ERRORS["bad_client.py"] for e in errors), errors
    assert '"read_text_file"' in errors[0] and '"request_permission"' in errors[1]


def test_session_update_refuses_a_whole_notification(
    mypy_output: dict[str, list[tuple[str, str]]],
) -> None:
    """``conn.session_update(sid, SessionNotification(...))`` is an argument type error:
    it takes the update itself (what ``acpkit.builders`` returns)."""
    errors = _errors(mypy_output["bad_session_update.py"])
    assert len(errors) == 1, errors
    assert _code(errors[0]) in EXPECTED_ERRORS["bad_session_update.py"]
    assert "SessionNotification" in errors[0]
