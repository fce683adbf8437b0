"""
Asking the user structured questions: the ``ask_user`` form, its ``elicitation/create``
request, the ``session/request_permission`` fallback, and what the model gets back.

A form is a list of :class:`Question` (``choice``, ``multi``, ``text``, ``confirm``).
:class:`UserAsker` asks it for one tool call of one session:

- the client advertised ``clientCapabilities.elicitation.form``: ONE ``elicitation/create``
  in form mode (:func:`form_request`), properties ``q1``, ``q2``… (seed 000, "Requêtes
  elicitation/create envoyées"); the answer is mapped by :func:`outcome_of_response`;
- otherwise, a form made only of ``choice``/``confirm`` questions goes out as one
  ``session/request_permission`` per question (:func:`permission_request`); any other form
  cannot be asked.

:class:`FormOutcome` is the result (answered, declined, cancelled, or nobody can be asked)
and :meth:`FormOutcome.for_model` the text the model receives.  :class:`UserAsker` also
relays questions of another agent (``ask_agent``) to our own client.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger

from acpkit import codec, schema
from acpkit.connection import AgentConnection
from acpkit.errors import RPCError

__all__ = [
    "ELICITATION_SCOPE_META",
    "FormOutcome",
    "FormStatus",
    "Question",
    "QuestionError",
    "UserAsker",
    "form_message",
    "form_request",
    "outcome_of_response",
    "parse_questions",
    "permission_request",
    "question_schema",
]

_log = Logger()

ELICITATION_SCOPE_META = "acpkit.elicitationScope"
"""``_meta`` key carrying a copy of ``{"sessionId", "toolCallId"}`` (the seed's
``mm.elicitationScope``)."""

QUESTION_TYPES = ("choice", "multi", "text", "confirm")
MAX_QUESTIONS = 20
DECLINE_OPTION = "decline"


class QuestionError(ValueError):
    """The model's questions are not a valid form; the message is meant for the model."""


@attrs.frozen
class Question:
    """One question of a form.

    ``options`` is set for ``choice`` and ``multi`` only; ``default`` is a string (``choice``,
    ``text``), a list of strings (``multi``), a boolean (``confirm``), or None.
    """

    type: str
    text: str
    options: tuple[str, ...] = ()
    default: str | tuple[str, ...] | bool | None = None


def _parse_one(index: int, raw: Any) -> Question:
    where = f"question {index}"
    if not isinstance(raw, Mapping):
        raise QuestionError(f"{where} must be an object, got {raw!r}")
    unknown = set(raw) - {"question", "type", "options", "default"}
    if unknown:
        raise QuestionError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
    text = raw.get("question")
    if not isinstance(text, str) or not text.strip():
        raise QuestionError(f"{where} needs 'question', a non-empty string")
    kind = raw.get("type", "text")
    if kind not in QUESTION_TYPES:
        raise QuestionError(f"{where}: 'type' must be one of {', '.join(QUESTION_TYPES)}")
    options: tuple[str, ...] = ()
    if kind in ("choice", "multi"):
        values = raw.get("options")
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str) and v.strip() for v in values)
        ):
            raise QuestionError(f"{where} ({kind}) needs 'options', a list of non-empty strings")
        if len(set(values)) != len(values):
            raise QuestionError(f"{where} ({kind}) has duplicate options")
        options = tuple(values)
    elif raw.get("options") is not None:
        raise QuestionError(f"{where} ({kind}) takes no 'options'")
    default = raw.get("default")
    checked: str | tuple[str, ...] | bool | None = None
    if default is not None:
        if kind == "confirm":
            if not isinstance(default, bool):
                raise QuestionError(f"{where}: the default of a confirm must be true or false")
            checked = default
        elif kind == "multi":
            if not isinstance(default, list) or not all(v in options for v in default):
                raise QuestionError(f"{where}: the default of a multi must be a list of options")
            checked = tuple(default)
        elif kind == "choice":
            if default not in options:
                raise QuestionError(f"{where}: the default of a choice must be one of its options")
            checked = default
        else:
            if not isinstance(default, str):
                raise QuestionError(f"{where}: the default of a text must be a string")
            checked = default
    return Question(type=kind, text=text.strip(), options=options, default=checked)


def parse_questions(args: Mapping[str, Any]) -> list[Question]:
    """The questions of ``ask_user``'s arguments; :class:`QuestionError` when invalid."""
    raw = args.get("questions")
    if not isinstance(raw, list) or not raw:
        raise QuestionError("'questions' must be a non-empty list of question objects")
    if len(raw) > MAX_QUESTIONS:
        raise QuestionError(f"at most {MAX_QUESTIONS} questions per call, got {len(raw)}")
    return [_parse_one(index, item) for index, item in enumerate(raw, start=1)]


def property_name(index: int) -> str:
    """The form property of the question at 0-based ``index``: ``q1``, ``q2``…"""
    return f"q{index + 1}"


def question_schema(question: Question) -> schema.ElicitationPropertySchema:
    """The ``requestedSchema`` property of one question (seed table)."""
    if question.type == "choice":
        return schema.StringPropertySchemaVariant(
            title=question.text,
            enum=list(question.options),
            default=question.default if isinstance(question.default, str) else None,
        )
    if question.type == "multi":
        default = question.default if isinstance(question.default, tuple) else None
        return schema.MultiSelectPropertySchemaVariant(
            title=question.text,
            items=schema.StringMultiSelectItemsVariant(enum=list(question.options)),
            default=list(default) if default is not None else None,
        )
    if question.type == "confirm":
        return schema.BooleanPropertySchemaVariant(
            title=question.text,
            default=question.default if isinstance(question.default, bool) else None,
        )
    return schema.StringPropertySchemaVariant(
        title=question.text,
        default=question.default if isinstance(question.default, str) else None,
    )


def form_message(questions: Sequence[Question]) -> str:
    """The question when there is one, else ``The agent has N questions for you.``"""
    if len(questions) == 1:
        return questions[0].text
    return f"The agent has {len(questions)} questions for you."


def form_request(
    session_id: str, tool_call_id: str, questions: Sequence[Question]
) -> schema.CreateElicitationRequestForm:
    """The ``elicitation/create`` request (form mode) asking ``questions``."""
    names = [property_name(i) for i in range(len(questions))]
    return schema.CreateElicitationRequestForm(
        message=form_message(questions),
        requested_schema=schema.ElicitationSchema(
            properties={name: question_schema(q) for name, q in zip(names, questions, strict=True)},
            required=names,
        ),
        session_id=session_id,
        tool_call_id=tool_call_id,
        meta={ELICITATION_SCOPE_META: {"sessionId": session_id, "toolCallId": tool_call_id}},
    )


class FormStatus(enum.Enum):
    """How a form ended."""

    ANSWERED = "answered"
    DECLINED = "declined"
    CANCELLED = "cancelled"
    UNAVAILABLE = "unavailable"
    """Nobody can be asked (no way to ask, or the client answered with an error)."""


Answer = str | list[str] | bool


@attrs.frozen
class FormOutcome:
    """The result of asking a form: a status, the answers by property name, a detail."""

    status: FormStatus
    answers: Mapping[str, Answer] = attrs.field(factory=dict)
    detail: str = ""

    def for_model(self, questions: Sequence[Question]) -> str:
        """The tool result text the model receives."""
        if self.status is FormStatus.DECLINED:
            return "[the user declined to answer]"
        if self.status is FormStatus.CANCELLED:
            return "[the user cancelled the questions]"
        if self.status is FormStatus.UNAVAILABLE:
            return f"[nobody can be asked: {self.detail}]"
        lines = ["The user answered:"]
        for index, question in enumerate(questions):
            value = self.answers.get(property_name(index))
            lines.append(f"{index + 1}. {question.text} → {_show(value)}")
        return "\n".join(lines)

    @property
    def failed(self) -> bool:
        """Whether the tool call ends ``failed`` (cancelled, or nobody could be asked)."""
        return self.status in (FormStatus.CANCELLED, FormStatus.UNAVAILABLE)


def _show(value: Answer | None) -> str:
    if value is None:
        return "(no answer)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(value) if value else "(none selected)"
    return value if value else "(empty)"


def _typed_answer(question: Question, value: Any) -> Answer | None:
    """The answer ``value`` if it has the question's type (else None: no valid answer)."""
    if question.type == "confirm":
        return value if isinstance(value, bool) else None
    if question.type == "multi":
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        return None
    return value if isinstance(value, str) else None


def outcome_of_response(questions: Sequence[Question], response: Any) -> FormOutcome:
    """Map an ``elicitation/create`` response to a :class:`FormOutcome`."""
    if isinstance(response, schema.CreateElicitationResponseAccept):
        content = response.content or {}
        answers: dict[str, Answer] = {}
        for index, question in enumerate(questions):
            name = property_name(index)
            typed = _typed_answer(question, content.get(name))
            if typed is not None:
                answers[name] = typed
        return FormOutcome(FormStatus.ANSWERED, answers)
    if isinstance(response, schema.CreateElicitationResponseDecline):
        return FormOutcome(FormStatus.DECLINED)
    if isinstance(response, schema.CreateElicitationResponseCancel):
        return FormOutcome(FormStatus.CANCELLED)
    action = getattr(response, "tag", None)
    return FormOutcome(
        FormStatus.UNAVAILABLE, detail=f"the client answered an unknown action {action!r}"
    )


def permission_request(
    session_id: str, tool_call_id: str, question: Question
) -> schema.RequestPermissionRequest:
    """The ``session/request_permission`` asking one ``choice``/``confirm`` question."""
    labels = list(question.options) if question.type == "choice" else ["Yes", "No"]
    options = [
        schema.PermissionOption(
            option_id=str(index), name=label, kind=schema.PermissionOptionKind.ALLOW_ONCE
        )
        for index, label in enumerate(labels)
    ]
    options.append(
        schema.PermissionOption(
            option_id=DECLINE_OPTION, name="Decline", kind=schema.PermissionOptionKind.REJECT_ONCE
        )
    )
    return schema.RequestPermissionRequest(
        session_id=session_id,
        tool_call=schema.ToolCallUpdate(
            tool_call_id=tool_call_id, title=f"? {question.text}", kind=schema.ToolKind.OTHER
        ),
        options=options,
    )


def _describe(error: BaseException) -> str:
    if isinstance(error, RPCError):
        return f"the client answered with an error: {error}"
    return str(error) or type(error).__name__


@attrs.define
class UserAsker:
    """Asks the user of one session, for one tool call, through the agent connection."""

    conn: AgentConnection
    """The agent's connection."""
    session_id: str
    tool_call_id: str

    def forms_supported(self) -> bool:
        """Whether the client advertised ``elicitation.form`` (present and non-null)."""
        caps = getattr(self.conn, "client_capabilities", None)
        elicitation = getattr(caps, "elicitation", None) if caps is not None else None
        return getattr(elicitation, "form", None) is not None

    async def ask(self, questions: Sequence[Question]) -> FormOutcome:
        """Ask ``questions``: a form, the permission fallback, or nobody can be asked."""
        if self.forms_supported():
            return await self._ask_form(questions)
        if all(q.type in ("choice", "confirm") for q in questions):
            return await self._ask_by_permission(questions)
        return FormOutcome(
            FormStatus.UNAVAILABLE,
            detail="the client cannot show forms (no elicitation.form capability), and only "
            "choice and confirm questions can be asked without one",
        )

    async def _ask_form(self, questions: Sequence[Question]) -> FormOutcome:
        request = form_request(self.session_id, self.tool_call_id, questions)
        try:
            response = await self.conn.create_elicitation(request)
        except CancelledError:
            raise
        except Exception as error:
            _log.warn(
                "[acp] session {sid}: elicitation/create failed ({error})",
                sid=self.session_id,
                error=_describe(error),
            )
            return FormOutcome(FormStatus.UNAVAILABLE, detail=_describe(error))
        return outcome_of_response(questions, response)

    async def _ask_by_permission(self, questions: Sequence[Question]) -> FormOutcome:
        answers: dict[str, Answer] = {}
        for index, question in enumerate(questions):
            request = permission_request(self.session_id, self.tool_call_id, question)
            try:
                response = await self.conn.request_permission(request)
            except CancelledError:
                raise
            except Exception as error:
                return FormOutcome(FormStatus.UNAVAILABLE, detail=_describe(error))
            outcome = response.outcome
            if not isinstance(outcome, schema.SelectedPermissionOutcome):
                return FormOutcome(FormStatus.CANCELLED)
            choice = outcome.option_id
            if choice == DECLINE_OPTION:
                return FormOutcome(FormStatus.DECLINED)
            labels = question.options if question.type == "choice" else ("Yes", "No")
            if not choice.isdigit() or int(choice) >= len(labels):
                return FormOutcome(
                    FormStatus.UNAVAILABLE, detail=f"the client chose an unknown option {choice!r}"
                )
            position = int(choice)
            name = property_name(index)
            answers[name] = (
                question.options[position] if question.type == "choice" else (position == 0)
            )
        return FormOutcome(FormStatus.ANSWERED, answers)

    # -- relaying another agent's questions (ask_agent) --------------------------------

    def relay_elicitation(self, request: Any, source: str) -> Deferred[Any]:
        """
        Ask our user a form another agent (``source``) sent: the same message and schema,
        re-scoped to our session and tool call.  Fails with an :class:`RPCError` when our
        client cannot show forms or the request is not a form.
        """
        if not isinstance(request, schema.CreateElicitationRequestForm):
            mode = codec.wire_tag(request)
            return _rpc_failure(f"{source}: only form elicitations can be relayed, not {mode!r}")
        if not self.forms_supported():
            return _rpc_failure(
                f"{source} asked a question, but the user's client cannot show forms"
            )
        meta = dict(request.meta or {})
        meta[ELICITATION_SCOPE_META] = {
            "sessionId": self.session_id,
            "toolCallId": self.tool_call_id,
        }
        meta["acpkit.relayedFrom"] = {
            "agent": source,
            "sessionId": request.session_id,
            "toolCallId": request.tool_call_id,
        }
        relayed = attrs.evolve(
            request,
            message=f"{source}: {request.message}",
            session_id=self.session_id,
            tool_call_id=self.tool_call_id,
            meta=meta,
        )
        d: Deferred[Any] = self.conn.create_elicitation(relayed)
        return d

    def relay_permission(self, request: schema.RequestPermissionRequest, source: str) -> Any:
        """
        Ask our user a permission another agent (``source``) asked: its options, on our tool
        call, titled ``<source>: <its title>``.  Our answer (or ``cancelled``) goes back.
        """
        title = request.tool_call.title or "a tool call"
        relayed = schema.RequestPermissionRequest(
            session_id=self.session_id,
            tool_call=schema.ToolCallUpdate(
                tool_call_id=self.tool_call_id,
                title=f"{source}: {title}",
                kind=request.tool_call.kind,
                raw_input=request.tool_call.raw_input,
            ),
            options=list(request.options),
        )
        return self.conn.request_permission(relayed)


def _rpc_failure(message: str) -> Deferred[Any]:
    d: Deferred[Any] = Deferred()
    d.errback(RPCError(-32601, message))
    return d
