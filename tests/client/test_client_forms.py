"""
Form elicitations in the client: the fields read from the agent's schema, the typed
answers checked, the window announcing ``elicitation.form`` only with a form prompt and
declining what it cannot ask, and ``ask``'s terminal prompt (issue 26, item 10).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.defer import Deferred, succeed
from zope.interface import implementer

from acpkit import codec, schema
from acpkit.testing.pair import ConnectedPair, connected_pair
from acpkit_client.cli import TerminalFormPrompt
from acpkit_client.forms import EMPTY, FormField, UnsupportedForm, form_fields, parse_answer
from acpkit_client.interfaces import IFormPrompt
from acpkit_client.session import AgentWindow
from tests.client.test_client_session import ENTRY, start
from tests.fixtures.client.tiny_agent import TinyAgent

#: bob's ask_user form (tests/agent/test_agent_ask_user.py), as on the wire.
FORM = {
    "type": "object",
    "properties": {
        "q1": {"type": "string", "title": "Which database?", "enum": ["sqlite", "postgres"]},
        "q2": {
            "type": "array",
            "title": "Which extras?",
            "items": {"type": "string", "enum": ["auth", "billing", "search"]},
            "default": ["auth"],
        },
        "q3": {"type": "string", "title": "Project name?", "default": "demo"},
        "q4": {"type": "boolean", "title": "Create a git repository?", "default": True},
        "port": {"type": "integer", "title": "Port", "minimum": 1024, "maximum": 65535},
        "mail": {"type": "string", "title": "Mail", "format": "email"},
        "level": {
            "type": "string",
            "title": "Level",
            "oneOf": [{"const": "lo", "title": "Low"}, {"const": "hi", "title": "High"}],
        },
    },
    "required": ["q1", "q2", "q3", "q4"],
}


def field(name: str) -> FormField:
    return next(f for f in form_fields(FORM) if f.name == name)


def test_fields_in_order_with_choices_defaults_and_required() -> None:
    """Each property is a field: its kind, title, choices, default and whether required."""
    fields = form_fields(FORM)
    assert [f.name for f in fields] == ["q1", "q2", "q3", "q4", "port", "mail", "level"]
    assert field("q1").choices == (("sqlite", "sqlite"), ("postgres", "postgres"))
    assert field("q2").multiple and field("q2").default == ["auth"]
    assert field("level").choices == (("lo", "Low"), ("hi", "High"))
    assert field("q1").required and not field("port").required
    assert field("port").default is EMPTY


@pytest.mark.parametrize(
    ("name", "typed", "value", "why"),
    [
        ("q1", "2", "postgres", None),
        ("q1", "sqlite", "sqlite", None),
        ("q1", "mysql", None, "one of the choices"),
        ("q1", "", None, "an answer is required"),
        ("q2", "1, 3", ["auth", "search"], None),
        ("q2", "", ["auth"], None),
        ("q2", "4", None, "'4' is not one of the choices"),
        ("q3", "", "demo", None),
        ("q3", "shop", "shop", None),
        ("q4", "n", False, None),
        ("q4", "maybe", None, "yes or no"),
        ("port", "8080", 8080, None),
        ("port", "80", None, "at least 1024"),
        ("port", "eighty", None, "a whole number"),
        ("port", "", EMPTY, None),
        ("mail", "a@b.org", "a@b.org", None),
        ("mail", "nope", None, "an email address"),
        ("level", "High", "hi", None),
    ],
)
def test_typed_answers(name: str, typed: str, value: Any, why: str | None) -> None:
    """A typed line is the field's value, or the reason it is not one."""
    assert parse_answer(field(name), typed) == (value, why)


def test_an_unknown_property_type_is_unsupported() -> None:
    """A property of a type outside the RFD's restricted schema cannot be asked."""
    with pytest.raises(UnsupportedForm, match="'where'"):
        form_fields({"type": "object", "properties": {"where": {"type": "object"}}})


# -- the window ---------------------------------------------------------------------------


@implementer(IFormPrompt)
class Answering:
    """A form prompt giving a fixed answer and keeping what it was asked."""

    def __init__(self, answer: Any) -> None:
        self.answer_given = answer
        self.asked: list[tuple[str, list[str]]] = []

    def answer(self, message: str, fields: Sequence[FormField]) -> Deferred[Any]:
        self.asked.append((message, [f.name for f in fields]))
        return succeed(self.answer_given)


def form_request(sid: str, requested: dict[str, Any] | None = None) -> Any:
    return codec.decode(
        schema.CreateElicitationRequestForm,
        {
            "sessionId": sid,
            "mode": "form",
            "message": "Set up?",
            "requestedSchema": requested or FORM,
        },
    )


def open_with(tmp_path: Path, prompt: IFormPrompt | None) -> tuple[AgentWindow, ConnectedPair]:
    window = AgentWindow(ENTRY, str(tmp_path), form_prompt=prompt, environ={})
    pair = connected_pair(lambda conn: TinyAgent(conn, "normal"), window)
    start(window, pair)
    return window, pair


def test_with_a_form_prompt_forms_are_announced_and_asked(tmp_path: Path) -> None:
    """``elicitation.form`` (never ``url``) is announced; a form is answered ``accept``."""
    prompt = Answering({"q1": "sqlite", "q4": False})
    _window, pair = open_with(tmp_path, prompt)
    caps = pair.agent.client_capabilities
    assert caps is not None and caps.elicitation is not None
    assert caps.elicitation.form is not None and caps.elicitation.url is None
    answer = pair.result(pair.agent.create_elicitation(form_request("s1")))
    assert codec.encode(answer) == {"action": "accept", "content": {"q1": "sqlite", "q4": False}}
    assert prompt.asked == [("Set up?", ["q1", "q2", "q3", "q4", "port", "mail", "level"])]


@pytest.mark.parametrize("given", ["decline", "cancel"])
def test_the_user_declines_or_cancels(tmp_path: Path, given: str) -> None:
    """The prompt's ``decline`` or ``cancel`` is the answer's action."""
    _window, pair = open_with(tmp_path, Answering(given))
    answer = pair.result(pair.agent.create_elicitation(form_request("s1")))
    assert codec.encode(answer) == {"action": given}


def test_without_a_form_prompt_nothing_is_announced_and_a_form_is_declined(
    tmp_path: Path,
) -> None:
    """No ``elicitation`` capability; an agent that asks anyway gets ``decline``, not an
    error, and Agent status notes it."""
    window, pair = open_with(tmp_path, None)
    caps = pair.agent.client_capabilities
    assert caps is not None and caps.elicitation is None
    wire = pair.result(
        pair.agent.protocol.request(
            "elicitation/create",
            {"sessionId": "s1", "mode": "form", "message": "?", "requestedSchema": FORM},
        )
    )
    assert wire == {"action": "decline"}
    assert window.run.notes == [
        "the agent asked for an elicitation in 'form' mode: declined (it was not announced)"
    ]


def test_a_form_this_client_cannot_ask_is_declined(tmp_path: Path) -> None:
    """A property of an unknown type: the whole form is declined, with the reason noted."""
    prompt = Answering({})
    window, pair = open_with(tmp_path, prompt)
    odd = {"type": "object", "properties": {"where": {"type": "object"}}}
    answer = pair.result(pair.agent.create_elicitation(form_request("s1", odd)))
    assert codec.encode(answer) == {"action": "decline"}
    assert prompt.asked == []
    assert "declined (the field 'where' has a type" in window.run.notes[0]


# -- ask's terminal prompt ----------------------------------------------------------------


class Lines:
    """A stand-in for the terminal's line reader: the typed lines, then end of input."""

    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)

    def read_line(self) -> Deferred[str | None]:
        return succeed(self.lines.pop(0) if self.lines else None)


def ask_terminal(*typed: str) -> tuple[Any, str]:
    err = io.StringIO()
    prompt = TerminalFormPrompt(None, err, reader=Lines(*typed))  # type: ignore[arg-type]
    result: list[Any] = []
    Deferred.fromCoroutine(prompt.answer("Set up?", form_fields(FORM))).addCallback(result.append)
    return result[0], err.getvalue()


def test_the_terminal_asks_each_field_and_asks_again_when_wrong() -> None:
    """Field by field: choices by number, defaults on Enter, a wrong answer asked again."""
    answers, shown = ask_terminal("2", "", "", "no", "80", "8080", "", "2")
    assert answers == {
        "q1": "postgres",
        "q2": ["auth"],
        "q3": "demo",
        "q4": False,
        "port": 8080,
        "level": "hi",
    }
    assert "The agent asks: Set up?" in shown
    assert "  Which database? (required)\n    1. sqlite\n    2. postgres\n" in shown
    assert "  at least 1024\n" in shown


def test_the_terminal_declines_on_a_dash_and_cancels_at_end_of_input() -> None:
    """``-`` declines the whole form; end of input cancels it."""
    assert ask_terminal("1", "-")[0] == "decline"
    assert ask_terminal("1")[0] == "cancel"
