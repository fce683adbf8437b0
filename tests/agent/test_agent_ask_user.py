"""
``ask_user`` and elicitation (seed 000, "Requêtes elicitation/create envoyées"): the form
request, each answer row, the turn cancelled, and the ``session/request_permission``
fallback for clients without form support — all through an acpkit client in memory.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from acpkit import codec, schema
from acpkit.errors import RPCError
from acpkit_agent.elicitation import (
    FormStatus,
    Question,
    QuestionError,
    form_request,
    outcome_of_response,
    parse_questions,
)
from acpkit_agent.engines.scripted import ScriptedEngine
from tests.fixtures.agent.harness import CANCELLED_ANSWER, Harness, RecordingClient
from tests.fixtures.agent_b.clients import (
    FORM_CAPABILITIES,
    ElicitingClient,
    call,
    make_b_harness,
)

FOUR_QUESTIONS: list[dict[str, Any]] = [
    {"question": "Which database?", "type": "choice", "options": ["sqlite", "postgres"]},
    {
        "question": "Which extras?",
        "type": "multi",
        "options": ["auth", "billing", "search"],
        "default": ["auth"],
    },
    {"question": "Project name?", "type": "text", "default": "demo"},
    {"question": "Create a git repository?", "type": "confirm", "default": True},
]


def ask_turns(questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"tool_calls": [call("ask_user", questions=questions)]},
        {"chunks": ["Thanks."]},
    ]


def start(questions: list[dict[str, Any]], *, forms: bool = True) -> tuple[Harness, str]:
    client: RecordingClient = ElicitingClient() if forms else RecordingClient()
    h = make_b_harness(ask_turns(questions), client=client)
    sid = h.start(capabilities=FORM_CAPABILITIES if forms else None)
    h.client.updates.clear()
    return h, sid


def eliciting(h: Harness) -> ElicitingClient:
    """The harness's client: an ElicitingClient when ``start`` was asked for forms."""
    client = h.client
    assert isinstance(client, ElicitingClient)
    return client


def received_messages(h: Harness) -> list[dict[str, Any]]:
    """The messages of the scripted engine's last model call."""
    engine = h.runtime.engine
    assert isinstance(engine, ScriptedEngine)
    return engine.received[-1].messages


def tool_result(h: Harness) -> str:
    """What the model received for the ask_user call (the tool message of the 2nd call)."""
    messages = received_messages(h)
    tool_messages = [m for m in messages if m["role"] == "tool"]
    content: str = tool_messages[-1]["content"]
    return content


def final_update(h: Harness) -> dict[str, Any]:
    return h.client.tool_updates()[-1]


# -- the form request -------------------------------------------------------------------


def test_form_request_shape() -> None:
    """One elicitation/create in form mode: q1…q4 by type, defaults, required, scope in _meta."""
    h, sid = start(FOUR_QUESTIONS)
    client = eliciting(h)
    client.elicitation_answers.append({"action": "decline"})
    h.raw_prompt(sid, "set up a project")
    assert len(client.elicitations) == 1
    assert client.elicitations[0] == {
        "sessionId": sid,
        "toolCallId": "call_1",
        "mode": "form",
        "message": "The agent has 4 questions for you.",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "q1": {
                    "type": "string",
                    "title": "Which database?",
                    "enum": ["sqlite", "postgres"],
                },
                "q2": {
                    "type": "array",
                    "title": "Which extras?",
                    "items": {"type": "string", "enum": ["auth", "billing", "search"]},
                    "default": ["auth"],
                },
                "q3": {"type": "string", "title": "Project name?", "default": "demo"},
                "q4": {"type": "boolean", "title": "Create a git repository?", "default": True},
            },
            "required": ["q1", "q2", "q3", "q4"],
        },
        "_meta": {"acpkit.elicitationScope": {"sessionId": sid, "toolCallId": "call_1"}},
    }


def test_single_question_message_and_tool_call_announced_first() -> None:
    """With one question the message is the question; the tool_call came before the request."""
    h, sid = start([FOUR_QUESTIONS[0]])
    client = eliciting(h)
    client.elicitation_answers.append({"action": "accept", "content": {"q1": "postgres"}})
    h.raw_prompt(sid, "pick")
    request = client.elicitations[0]
    assert request["message"] == "Which database?"
    announced = [u for u in client.updates_before[0] if u["sessionUpdate"] == "tool_call"]
    assert announced == [
        {
            "sessionUpdate": "tool_call",
            "toolCallId": request["toolCallId"],
            "title": "ask_user: Which database?",
            "kind": "other",
            "status": "pending",
            "rawInput": {"questions": [FOUR_QUESTIONS[0]]},
        }
    ]


# -- the answers ------------------------------------------------------------------------


def test_accept_maps_answers_by_property() -> None:
    """accept + content: each answer read by property name (string, list, boolean)."""
    h, sid = start(FOUR_QUESTIONS)
    client = eliciting(h)
    client.elicitation_answers.append(
        {
            "action": "accept",
            "content": {"q1": "postgres", "q2": ["auth", "search"], "q3": "shop", "q4": False},
        }
    )
    result = h.raw_prompt(sid, "set up")
    assert result["stopReason"] == "end_turn"
    assert tool_result(h) == (
        "The user answered:\n"
        "1. Which database? → postgres\n"
        "2. Which extras? → auth, search\n"
        "3. Project name? → shop\n"
        "4. Create a git repository? → no"
    )
    last = final_update(h)
    assert last["status"] == "completed"
    assert last["rawOutput"] == {"output": tool_result(h)}


def test_accept_with_missing_or_mistyped_answers() -> None:
    """An answer missing from content, or of the wrong type, is reported as no answer."""
    h, sid = start(FOUR_QUESTIONS[:2])
    client = eliciting(h)
    client.elicitation_answers.append({"action": "accept", "content": {"q2": "auth"}})
    h.raw_prompt(sid, "go")
    assert tool_result(h) == (
        "The user answered:\n1. Which database? → (no answer)\n2. Which extras? → (no answer)"
    )


def test_decline() -> None:
    """decline: the model is told the user declined; the call completes."""
    h, sid = start(FOUR_QUESTIONS)
    eliciting(h).elicitation_answers.append({"action": "decline"})
    h.raw_prompt(sid, "go")
    assert tool_result(h) == "[the user declined to answer]"
    assert final_update(h)["status"] == "completed"


def test_cancel_action() -> None:
    """cancel: the model is told the questions were cancelled; the call fails."""
    h, sid = start(FOUR_QUESTIONS)
    eliciting(h).elicitation_answers.append({"action": "cancel"})
    result = h.raw_prompt(sid, "go")
    assert result["stopReason"] == "end_turn"
    assert tool_result(h) == "[the user cancelled the questions]"
    assert final_update(h)["status"] == "failed"


def test_error_response_means_nobody_can_be_asked() -> None:
    """An error response: nobody can be asked, and the turn goes on."""
    h, sid = start(FOUR_QUESTIONS)
    eliciting(h).elicitation_answers.append(RPCError(-32000, "no UI here"))
    result = h.raw_prompt(sid, "go")
    assert result["stopReason"] == "end_turn"
    assert tool_result(h).startswith("[nobody can be asked: the client answered with an error")
    assert "no UI here" in tool_result(h)
    assert final_update(h)["status"] == "failed"


def test_turn_cancelled_while_asking() -> None:
    """session/cancel while the form is open: the turn ends cancelled, the call failed."""
    h, sid = start(FOUR_QUESTIONS)
    client = eliciting(h)
    d = h.prompt(sid, "go")
    h.pair.pump()
    assert len(client.held_elicitations) == 1
    h.pair.client.cancel(sid)
    h.pair.pump()
    assert h.pair.result(d).stop_reason == "cancelled"
    last = final_update(h)
    assert last["status"] == "failed"
    assert last["rawOutput"] == {"output": "[tool call cancelled by the user]"}


def test_invalid_questions_fail_without_asking() -> None:
    """Invalid questions end the call failed with the reason, and nobody is asked."""
    h, sid = start([{"question": "Which?", "type": "choice"}])
    h.raw_prompt(sid, "go")
    assert eliciting(h).elicitations == []
    assert tool_result(h).startswith("[invalid questions: question 1 (choice) needs 'options'")
    assert final_update(h)["status"] == "failed"


# -- without form support: the permission fallback ----------------------------------------


def test_fallback_one_permission_request_per_question() -> None:
    """choice/confirm forms go out as session/request_permission, one per question."""
    questions = [FOUR_QUESTIONS[0], FOUR_QUESTIONS[3]]
    h, sid = start(questions, forms=False)
    h.client.answers.extend(["1", "0"])
    h.raw_prompt(sid, "go")
    requests = [codec.encode(r) for r in h.client.permission_requests]
    assert requests == [
        {
            "sessionId": sid,
            "toolCall": {"toolCallId": "call_1", "title": "? Which database?", "kind": "other"},
            "options": [
                {"optionId": "0", "name": "sqlite", "kind": "allow_once"},
                {"optionId": "1", "name": "postgres", "kind": "allow_once"},
                {"optionId": "decline", "name": "Decline", "kind": "reject_once"},
            ],
        },
        {
            "sessionId": sid,
            "toolCall": {
                "toolCallId": "call_1",
                "title": "? Create a git repository?",
                "kind": "other",
            },
            "options": [
                {"optionId": "0", "name": "Yes", "kind": "allow_once"},
                {"optionId": "1", "name": "No", "kind": "allow_once"},
                {"optionId": "decline", "name": "Decline", "kind": "reject_once"},
            ],
        },
    ]
    assert tool_result(h) == (
        "The user answered:\n1. Which database? → postgres\n2. Create a git repository? → yes"
    )


def test_fallback_decline_stops_the_form() -> None:
    """Decline on the first question declines the form; no further question is asked."""
    h, sid = start([FOUR_QUESTIONS[0], FOUR_QUESTIONS[3]], forms=False)
    h.client.answers.append("decline")
    h.raw_prompt(sid, "go")
    assert len(h.client.permission_requests) == 1
    assert tool_result(h) == "[the user declined to answer]"


def test_fallback_cancelled_outcome_cancels_the_form() -> None:
    """A cancelled permission outcome cancels the form."""
    h, sid = start([FOUR_QUESTIONS[3], FOUR_QUESTIONS[0]], forms=False)
    h.client.answers.append(CANCELLED_ANSWER)
    h.raw_prompt(sid, "go")
    assert len(h.client.permission_requests) == 1
    assert tool_result(h) == "[the user cancelled the questions]"
    assert final_update(h)["status"] == "failed"


def test_fallback_error_means_nobody_can_be_asked() -> None:
    """A permission request answered with an error: nobody can be asked."""
    h, sid = start([FOUR_QUESTIONS[3]], forms=False)
    h.client.answers.append(RPCError(-32603, "broken"))
    h.raw_prompt(sid, "go")
    assert tool_result(h).startswith("[nobody can be asked: the client answered with an error")


def test_without_forms_text_questions_cannot_be_asked() -> None:
    """A form with text or multi questions and no form support: nobody is asked."""
    h, sid = start(FOUR_QUESTIONS, forms=False)
    h.raw_prompt(sid, "go")
    assert h.client.permission_requests == []
    assert tool_result(h).startswith("[nobody can be asked: the client cannot show forms")
    assert final_update(h)["status"] == "failed"


def test_no_permission_asked_for_ask_user_when_not_yolo() -> None:
    """ask_user never needs a permission of its own (yolo = false): only the form is asked."""
    from acpkit_agent.config import AgentConfig

    client = ElicitingClient()
    client.elicitation_answers.append({"action": "decline"})
    h = make_b_harness(ask_turns(FOUR_QUESTIONS), client=client, config=AgentConfig(yolo=False))
    sid = h.start(capabilities=FORM_CAPABILITIES)
    h.raw_prompt(sid, "go")
    assert client.permission_requests == []
    assert len(client.elicitations) == 1


# -- the pieces, property-checked ----------------------------------------------------------

_option = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1).filter(
    lambda s: bool(s.strip())
)


@st.composite
def questions(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["choice", "multi", "text", "confirm"]))
    raw: dict[str, Any] = {"question": draw(_option), "type": kind}
    if kind in ("choice", "multi"):
        options = draw(st.lists(_option, min_size=1, max_size=5, unique=True))
        raw["options"] = options
        if draw(st.booleans()):
            raw["default"] = (
                draw(st.sampled_from(options))
                if kind == "choice"
                else draw(st.lists(st.sampled_from(options), unique=True))
            )
    elif draw(st.booleans()):
        raw["default"] = draw(st.booleans()) if kind == "confirm" else draw(st.text())
    return raw


def _answer_for(question: Question, data: st.DataObject) -> Any:
    if question.type == "confirm":
        return data.draw(st.booleans())
    if question.type == "multi":
        return data.draw(st.lists(st.sampled_from(question.options), unique=True))
    if question.type == "choice":
        return data.draw(st.sampled_from(question.options))
    return data.draw(st.text())


@given(st.lists(questions(), min_size=1, max_size=6), st.data())
def test_form_round_trip(raw: list[dict[str, Any]], data: st.DataObject) -> None:
    """Any valid form encodes to the schema's shape, decodes back, and accepted answers map."""
    parsed = parse_questions({"questions": raw})
    request = form_request("s", "call_9", parsed)
    wire = codec.encode(request)
    assert codec.encode(codec.decode(schema.CreateElicitationRequest, wire)) == wire
    names = [f"q{i}" for i in range(1, len(parsed) + 1)]
    assert wire["requestedSchema"]["required"] == names
    assert list(wire["requestedSchema"]["properties"]) == names
    content = {name: _answer_for(q, data) for name, q in zip(names, parsed, strict=True)}
    response = codec.decode(
        schema.CreateElicitationResponse, {"action": "accept", "content": content}
    )
    outcome = outcome_of_response(parsed, response)
    assert outcome.status is FormStatus.ANSWERED
    assert dict(outcome.answers) == content


@given(st.dictionaries(st.text(), st.integers() | st.text() | st.none(), max_size=4))
def test_garbage_questions_are_refused_clearly(raw: dict[str, Any]) -> None:
    """Arbitrary question objects either parse or raise QuestionError (never anything else)."""
    try:
        parse_questions({"questions": [raw]})
    except QuestionError as error:
        assert str(error)
