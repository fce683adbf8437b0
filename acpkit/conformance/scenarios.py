"""
Stimuli: the prompts that make an agent do each thing the tester needs to see (a long turn
to cancel, a permission request, a tool call, a file read...), whoever knows them.

Three sources, in order of precedence for each behaviour:

1. a **scenario file** the user gives (``--scenarios FILE``), for agents whose behaviours
   cannot be discovered;
2. the **conformance model** (``--model-server``), which plays each scenario with the
   agent's own tools;
3. the agent's **advertised commands**, learned by trying them
   (`acpkit.conformance.discovery`).

Without any, a behaviour's prompt is plain words (`acpkit.conformance.harness.SCENARIOS`).

The scenario file is TOML with one table; every key is optional::

    [scenarios]
    slow = "Count to twenty, slowly"            # a turn long enough to be cancelled
    permission = "Delete {file}"                # the agent asks session/request_permission
    tools = "Summarise {file}"                  # the agent reports a tool call
    read = "Show me {file}"                     # fs/read_text_file
    write = "Write a haiku into poem.txt"       # fs/write_text_file
    shell = "Run ls"                            # terminal/create
    plan = "Plan a small refactoring"           # a plan update
    usage = "/cost"                             # a usage_update
    ask = "Ask me my name"                      # elicitation/create
    mode = "/mode architect"                    # a mode or config option change
    edit = "Fix the typo in {file}"             # a tool call with a diff
    text = "Say hello"                          # a plain answer

In a prompt, ``{file}`` is the name of a small text file the tester puts in each session's
directory and ``{cwd}`` that directory.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

import attrs

__all__ = [
    "BEHAVIOURS",
    "SAMPLE_FILE",
    "ScenarioError",
    "Stimuli",
    "load_scenarios",
    "parse_scenarios",
    "parse_scenarios_table",
]

#: Each behaviour the tester needs a prompt for, and what the prompt must make the agent do.
BEHAVIOURS: dict[str, str] = {
    "slow": "a turn long enough to be cancelled (two seconds or more)",
    "permission": "a session/request_permission",
    "tools": "a tool call (tool_call updates)",
    "read": "an fs/read_text_file request",
    "write": "an fs/write_text_file request",
    "shell": "a terminal (terminal/create)",
    "plan": "a plan update",
    "usage": "a usage_update",
    "ask": "an elicitation/create",
    "mode": "a mode or config option change (current_mode_update, config_option_update)",
    "edit": "a tool call with a diff",
    "text": "a plain answer",
}

#: The file the tester puts in every session directory, for ``{file}``.
SAMPLE_FILE = "notes.txt"
SAMPLE_TEXT = "first line\nsecond line\nthird line\n"
_TABLE = "scenarios"


class ScenarioError(ValueError):
    """The scenario file cannot be used (unreadable, not TOML, an unknown behaviour...)."""


@attrs.frozen
class Stimuli:
    """Prompts for behaviours (`BEHAVIOURS`), and where each came from."""

    #: behaviour -> the prompt text (with ``{file}`` / ``{cwd}`` placeholders)
    prompts: Mapping[str, str] = attrs.field(factory=dict)
    #: behaviour -> its source, in words ("the scenario file", "the command /countdown")
    sources: Mapping[str, str] = attrs.field(factory=dict)

    def __bool__(self) -> bool:
        return bool(self.prompts)

    def text(self, behaviour: str, cwd: str) -> str | None:
        """The prompt for ``behaviour`` in a session whose directory is ``cwd``."""
        prompt = self.prompts.get(behaviour)
        if prompt is None:
            return None
        return prompt.replace("{file}", SAMPLE_FILE).replace("{cwd}", cwd)

    def merged(self, more: Stimuli) -> Stimuli:
        """These prompts, with ``more``'s for the behaviours these lack."""
        prompts = {**more.prompts, **self.prompts}
        sources = {**more.sources, **self.sources}
        return Stimuli(prompts, {b: sources[b] for b in prompts})

    def describe(self) -> str:
        """One line: which behaviour comes from where."""
        return "; ".join(f"{b}: {self.sources.get(b, '?')}" for b in sorted(self.prompts))


def parse_scenarios(text: str, where: str = "the scenario file") -> Stimuli:
    """The prompts of a scenario file's text; `ScenarioError` names the problem."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{where} is not valid TOML: {e}") from None
    unknown_tables = sorted(set(document) - {_TABLE})
    if unknown_tables:
        raise ScenarioError(f"{where}: unknown key(s) {', '.join(unknown_tables)} (use [{_TABLE}])")
    table = document.get(_TABLE, {})
    if not isinstance(table, Mapping):
        raise ScenarioError(f'{where}: {_TABLE} must be a table of behaviour = "prompt"')
    return parse_scenarios_table(table, where)


def parse_scenarios_table(table: Mapping[str, object], where: str = "scenarios") -> Stimuli:
    """The prompts of a mapping behaviour -> prompt; `ScenarioError` names the problem."""
    prompts: dict[str, str] = {}
    for name, prompt in table.items():
        if name not in BEHAVIOURS:
            raise ScenarioError(
                f"{where}: {name!r} is not a behaviour (known: {', '.join(BEHAVIOURS)})"
            )
        if not isinstance(prompt, str) or not prompt.strip():
            raise ScenarioError(f"{where}: {name} needs a prompt (a non-empty string)")
        prompts[name] = prompt
    return Stimuli(prompts, dict.fromkeys(prompts, where))


def load_scenarios(path: str | Path) -> Stimuli:
    """The prompts of the scenario file at ``path`` (see `parse_scenarios`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"cannot read the scenario file {str(path)!r}: {e}") from None
    return parse_scenarios(text, f"the scenario file {str(path)!r}")
