"""
Skills (seed 000, "Les skills comme commandes", "Commandes disponibles"): the catalog and its
front matter, ``read_skill``, skills announced as commands, ``/name`` rewritten to ``$name``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from acpkit_agent.banner import banner_lines
from acpkit_agent.config import AgentConfig, ConfigError, parse_config
from acpkit_agent.skills import (
    SKILL_HINT,
    SkillError,
    SkillLibrary,
    load_catalog,
    parse_skill,
    rewrite_skill_command,
    skill_dirs,
    skills_prompt,
)
from acpkit_agent.tools.base import DiskFileAccess, ToolContext, ToolResult
from acpkit_agent.tools.plan import PlanState
from acpkit_agent.tools.skill import ReadSkillTool
from tests.fixtures.agent.harness import Harness, captured_logs, make_harness, scripted

GREETINGS = "---\nname: greetings\ndescription: Greet somebody with a festive message.\n---\n"
GREETINGS_BODY = "1. Say hello to the person named in the parameters.\n2. Add a confetti emoji."


def write_skill(root: Path, directory: str, text: str) -> Path:
    """Write ``<root>/<directory>/SKILL.md``."""
    folder = root / directory
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "SKILL.md"
    path.write_text(text, encoding="utf-8")
    return path


def skill_text(name: str, description: str, body: str = "Do the thing.") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home directory (the real ~/.config/acpkit/skills is never read)."""
    path = tmp_path / "home"
    path.mkdir()
    monkeypatch.setenv("HOME", str(path))
    return path


@pytest.fixture
def project(tmp_path: Path, home: Path) -> Path:
    """A project whose .acpkit/skills holds greetings, vulcan-salute and a broken skill."""
    root = tmp_path / "project"
    skills = root / ".acpkit" / "skills"
    write_skill(skills, "greetings", GREETINGS + GREETINGS_BODY + "\n")
    write_skill(skills, "vulcan", skill_text("vulcan-salute", "Send a vulcan salute to somebody."))
    write_skill(skills, "broken", "no front matter here\n")
    return root


def contexts(cwd: str) -> ToolContext:
    return ToolContext(
        cwd=cwd,
        files=DiskFileAccess(),
        reactor=None,
        plan=PlanState(),
        send_plan=lambda entries: None,
    )


def run_tool(tool: ReadSkillTool, cwd: str, args: dict[str, Any]) -> ToolResult:
    results: list[ToolResult] = []
    tool.run(contexts(cwd), args).addCallback(results.append)
    return results[0]


# -- front matter and catalog -------------------------------------------------------------


def test_parse_skill_front_matter_and_body() -> None:
    """name and description come from the front matter (quotes removed); the body is the rest."""
    skill = parse_skill(
        "---\nname: greetings\ndescription: 'Greet: festive'\n# a comment\n---\n\nStep 1.\n",
        "/s/SKILL.md",
    )
    assert (skill.name, skill.description, skill.body) == ("greetings", "Greet: festive", "Step 1.")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("name: x\n", "no front matter"),
        ("---\nname: x\ndescription: y\n", "not closed"),
        ("---\nname x\n---\nbody\n", "not 'key: value'"),
        ("---\ndescription: y\n---\nbody\n", "no 'name'"),
        ("---\nname: two words\ndescription: y\n---\nbody\n", "not a command name"),
        ("---\nname: x\n---\nbody\n", "no 'description'"),
        ("---\nname: x\ndescription: y\n---\n\n", "body"),
        ("---\nname: x\nname: z\ndescription: y\n---\nb\n", "twice"),
    ],
)
def test_malformed_skill_is_refused_with_a_reason(text: str, reason: str) -> None:
    """Each malformed SKILL.md raises SkillError saying what is wrong."""
    with pytest.raises(SkillError, match=reason):
        parse_skill(text, "/s/SKILL.md")


_NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True)
_ONE_LINE = st.text(st.characters(blacklist_categories=["Cc", "Cs", "Zl", "Zp"]), min_size=1).map(
    str.strip
)
_BODIES = st.text(min_size=1).filter(lambda b: bool(b.strip()) and "\r" not in b)
_YAML_START = "-?:,[]{}#&*!|>'\"%@`"
"""Characters that start YAML syntax (not plain text) at the start of a value."""


@given(
    name=_NAMES,
    description=_ONE_LINE.filter(
        lambda d: bool(d) and d[0] not in _YAML_START and " #" not in d and d[-1] not in "\"'"
    ),
    body=_BODIES,
)
def test_front_matter_round_trip(name: str, description: str, body: str) -> None:
    """
    Any valid name, one-line plain description and non-empty body read back as written
    (YAML plain text; a ': ' in it, not valid YAML, is read as the earlier subset did).
    """
    skill = parse_skill(f"---\nname: {name}\ndescription: {description}\n---\n{body}", "/p")
    assert skill.name == name
    assert skill.description == " ".join(description.split())
    assert skill.body == body.strip("\n")


@given(name=_NAMES, description=_ONE_LINE.filter(bool), body=_BODIES)
def test_front_matter_round_trip_of_any_quoted_description(
    name: str, description: str, body: str
) -> None:
    """Any description written as a YAML double-quoted string reads back as the text."""
    quoted = yaml.safe_dump(description, default_style='"', width=float("inf")).strip()
    skill = parse_skill(f"---\nname: {name}\ndescription: {quoted}\n---\n{body}", "/p")
    assert skill.name == name
    assert skill.description == " ".join(description.split())
    assert skill.body == body.strip("\n")


def test_front_matter_is_yaml_folded_scalars_and_block_lists() -> None:
    """
    The front matter is YAML: a folded ``description: >`` reads as its text, block lists
    and nested keys are accepted, comments are comments, and name/description are text as
    written (``name: 1.10`` is not a number).
    """
    text = (
        "---\n"
        "name: 1.10\n"
        "description: >\n"
        "  Start, wait on and stop\n"
        "  a background job.   # not a comment inside a folded scalar\n"
        "allowed-tools:\n"
        "  - bash\n"
        "  - read_file\n"
        "metadata:\n"
        "  version: 2  # a comment\n"
        "---\n"
        "Step 1.\n"
    )
    skill = parse_skill(text, "/s/SKILL.md")
    assert skill.name == "1.10"
    assert skill.description == (
        "Start, wait on and stop a background job. # not a comment inside a folded scalar"
    )
    assert skill.body == "Step 1."
    literal = parse_skill(
        "---\nname: lit\ndescription: |\n  Two\n  lines.\n---\nGo.\n", "/s/SKILL.md"
    )
    assert literal.description == "Two lines."
    quoted = parse_skill('---\nname: q\ndescription: "Use it: \\u00e9t\u00e9"\n---\nGo.\n', "/p")
    assert quoted.description == "Use it: \u00e9t\u00e9"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            "---\nname: x\ndescription:\n  - a\n - b\n---\nbody\n",
            "the front matter is not valid YAML: expected <block end>, but found "
            "'<block sequence start>' (line 5, column 2)",
        ),
        (
            "---\nname: x\ndescription:\n  - a\n  - b\n---\nbody\n",
            "the front matter's 'description' is a list, not text",
        ),
        (
            "---\nname: {a: 1}\ndescription: y\n---\nbody\n",
            "the front matter's 'name' is a mapping, not text",
        ),
        ("---\n- a\n- b\n---\nbody\n", "the front matter is not 'key: value' pairs"),
    ],
)
def test_invalid_yaml_front_matter_is_reported(text: str, reason: str) -> None:
    """Front matter that is neither valid YAML nor plain key: value lines is refused, saying why."""
    with pytest.raises(SkillError) as caught:
        parse_skill(text, "/s/SKILL.md")
    assert str(caught.value).startswith(reason)


def test_invalid_yaml_skill_is_skipped_not_fatal(tmp_path: Path) -> None:
    """A skill with invalid YAML front matter is a catalog problem; the others load."""
    skills = tmp_path / "skills"
    write_skill(skills, "ok", "---\nname: ok\ndescription: >\n  Folded\n  text.\n---\nGo.\n")
    bad = write_skill(skills, "bad", "---\nname: bad\ndescription:\n  - a\n - b\n---\nGo.\n")
    catalog = load_catalog([str(skills)])
    assert catalog.names() == ["ok"]
    ok = catalog.get("ok")
    assert ok is not None and ok.description == "Folded text."
    [problem] = catalog.problems
    assert problem.path == str(bad)
    assert problem.reason.startswith("the front matter is not valid YAML: ")


def test_catalog_order_duplicates_and_problems(tmp_path: Path) -> None:
    """cwd skills win over home's; duplicates and malformed skills are problems, not fatal."""
    cwd, home = tmp_path / "p", tmp_path / "h"
    write_skill(cwd / ".acpkit" / "skills", "a", skill_text("alpha", "Project alpha"))
    write_skill(home / ".config" / "acpkit" / "skills", "a", skill_text("alpha", "Home alpha"))
    write_skill(home / ".config" / "acpkit" / "skills", "b", skill_text("beta", "Home beta"))
    write_skill(tmp_path / "extra", "c", skill_text("gamma", "Extra gamma"))
    broken = write_skill(tmp_path / "extra", "d", "---\nname: delta\n---\nx\n")
    (tmp_path / "extra" / "not-a-skill").mkdir()
    dirs = skill_dirs(str(cwd), ["../extra", "~/nowhere"], str(home))
    assert dirs[:3] == [
        str(cwd / ".acpkit" / "skills"),
        str(home / ".config" / "acpkit" / "skills"),
        str(tmp_path / "extra"),
    ]
    catalog = load_catalog(dirs)
    assert catalog.names() == ["alpha", "beta", "gamma"]
    alpha = catalog.get("alpha")
    assert alpha is not None and alpha.description == "Project alpha"
    reasons = {problem.path: problem.reason for problem in catalog.problems}
    assert reasons[str(broken)] == "the front matter has no 'description'"
    assert any("already defined by" in reason for reason in reasons.values())


def test_reserved_names_not_announced_and_banner_says_why(tmp_path: Path) -> None:
    """A skill named new or compact is kept readable but not announced; the banner says why."""
    skills = tmp_path / "p" / ".acpkit" / "skills"
    write_skill(skills, "n", skill_text("new", "Shadow new"))
    write_skill(skills, "g", GREETINGS + GREETINGS_BODY)
    write_skill(skills, "bad", "oops\n")
    catalog = SkillLibrary(home=str(tmp_path / "h")).catalog(str(tmp_path / "p"))
    assert [s.name for s in catalog.announced()] == ["greetings"]
    assert catalog.get("new") is not None
    lines = banner_lines(
        AgentConfig(), "echo", "1", cwd=str(tmp_path / "p"), home=str(tmp_path / "h")
    )
    assert "  skills:      2 (greetings, new)" in lines
    assert any("skill 'new' is not announced: /new is a built-in command" in line for line in lines)
    assert any(
        line.startswith("  skill skipped: ") and "bad/SKILL.md: no front matter" in line
        for line in lines
    )


def test_config_skills_dirs_validated() -> None:
    """skills.dirs is a list of non-empty strings; anything else names the key."""
    config = parse_config({"skills": {"dirs": ["a", "~/b"]}}, "/c.toml")
    assert config.skills_dirs == ("a", "~/b")
    with pytest.raises(ConfigError, match=r"skills\.dirs must be a list of strings"):
        parse_config({"skills": {"dirs": "a"}}, "/c.toml")
    with pytest.raises(ConfigError, match=r"skills\.dirs must hold non-empty strings"):
        parse_config({"skills": {"dirs": ["a", 3]}}, "/c.toml")
    with pytest.raises(ConfigError, match=r"skills\.other is not a key"):
        parse_config({"skills": {"other": 1}}, "/c.toml")


def test_rewrite_only_announced_skills() -> None:
    """/greetings Bob → $greetings Bob; unknown /x, /new and other text are unchanged."""
    catalog = load_catalog([])
    assert rewrite_skill_command("/greetings Bob", catalog) == "/greetings Bob"
    skill = parse_skill(GREETINGS + GREETINGS_BODY, "/p")
    reserved = parse_skill(skill_text("new", "x"), "/q")
    from acpkit_agent.skills import SkillCatalog

    catalog = SkillCatalog(skills=(skill, reserved))
    assert rewrite_skill_command("/greetings Bob", catalog) == "$greetings Bob"
    assert rewrite_skill_command("  /greetings", catalog) == "  $greetings"
    assert rewrite_skill_command("/greetings\nBob", catalog) == "$greetings\nBob"
    assert rewrite_skill_command("/greetingsX", catalog) == "/greetingsX"
    assert rewrite_skill_command("/unknown x", catalog) == "/unknown x"
    assert rewrite_skill_command("/new x", catalog) == "/new x"
    assert rewrite_skill_command("say /greetings", catalog) == "say /greetings"
    assert rewrite_skill_command("$greetings Bob", catalog) == "$greetings Bob"


# -- read_skill ------------------------------------------------------------------------------


def test_read_skill_tool_contract(project: Path) -> None:
    """read_skill: kind read, title read_skill: <name>, never asks, returns the body."""
    tool = ReadSkillTool()
    assert tool.kind == "read"
    assert tool.title({"name": "greetings"}) == "read_skill: greetings"
    assert tool.needs_permission({"name": "greetings"}) is False
    result = run_tool(tool, str(project), {"name": "$greetings"})
    assert result == ToolResult(output=GREETINGS_BODY)
    unknown = run_tool(tool, str(project), {"name": "nope"})
    assert unknown.failed
    assert unknown.output == "[unknown skill 'nope': the skills are greetings, vulcan-salute]"
    missing = run_tool(tool, str(project), {})
    assert missing.failed and "missing required argument 'name'" in missing.output


# -- through the agent -----------------------------------------------------------------------


def command_names(h: Harness) -> list[str]:
    """The names of the first available_commands_update."""
    update = h.client.of_kind("available_commands_update")[0]
    return [command["name"] for command in update["availableCommands"]]


def agent(turns: list[dict[str, Any]] | None = None, **config: Any) -> Harness:
    engine = scripted({"turn": turns}) if turns is not None else None
    return make_harness(engine, config=AgentConfig(**config))


def test_skills_announced_after_new_and_compact(project: Path) -> None:
    """available_commands_update: new, compact, then each skill with its description and hint."""
    write_skill(project / ".acpkit" / "skills", "c", skill_text("compact", "Shadow compact"))
    h = agent()
    h.start(str(project))
    commands = h.client.of_kind("available_commands_update")[0]["availableCommands"]
    assert commands == [
        {"name": "new", "description": "Clear the history and start a new session"},
        {"name": "compact", "description": "Compress the history now, keeping the last turns"},
        {
            "name": "greetings",
            "description": "Greet somebody with a festive message.",
            "input": {"hint": SKILL_HINT},
        },
        {
            "name": "vulcan-salute",
            "description": "Send a vulcan salute to somebody.",
            "input": {"hint": "parameters, if this skill needs any"},
        },
    ]


def test_system_prompt_explains_dollar_and_lists_skills(project: Path) -> None:
    """The system prompt tells the model what $name means and lists the catalog."""
    h = agent()
    sid = h.start(str(project))
    session = h.agent.sessions.get(sid)
    assert session is not None
    system = session.history[0]["content"]
    assert "$name" in system and "read_skill" in system
    assert "- greetings: Greet somebody with a festive message." in system
    assert "- vulcan-salute: Send a vulcan salute to somebody." in system
    assert skills_prompt(load_catalog([])) == ""


def test_slash_skill_is_rewritten_and_the_model_reads_it(project: Path) -> None:
    """/greetings Bob reaches the model as $greetings Bob; its read_skill call runs unasked."""
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "read_skill", "arguments": {"name": "greetings"}}]},
        {"chunks": ["Hello Bob! 🎉"]},
    ]
    with captured_logs() as logs:
        h = agent(turns, yolo=False)
        sid = h.start(str(project))
        h.client.updates.clear()
        result = h.raw_prompt(sid, "/greetings Bob")
    assert result["stopReason"] == "end_turn"
    engine: Any = h.runtime.engine
    assert engine.received[0].messages[-1] == {"role": "user", "content": "$greetings Bob"}
    assert engine.received[1].messages[-1]["content"] == GREETINGS_BODY
    assert h.client.permission_requests == []
    updates = h.client.tool_updates()
    assert updates[0] == {
        "sessionUpdate": "tool_call",
        "toolCallId": "call_1",
        "title": "read_skill: greetings",
        "kind": "read",
        "status": "pending",
        "rawInput": {"name": "greetings"},
    }
    assert updates[-1]["status"] == "completed"
    assert updates[-1]["rawOutput"] == {"output": GREETINGS_BODY}
    assert h.client.text() == "Hello Bob! 🎉"
    assert "[acp] turn done: 0 command(s) · 0 file op(s) · 1 skill(s)" in logs.acp()


def test_dollar_by_hand_and_unknown_slash_go_to_the_model_unchanged(project: Path) -> None:
    """$greetings Bob typed by hand and an unknown /name reach the model as typed."""
    h = agent()
    sid = h.start(str(project))
    h.raw_prompt(sid, "$greetings Bob")
    h.raw_prompt(sid, "/unknown thing")
    session = h.agent.sessions.get(sid)
    assert session is not None
    users = [m["content"] for m in session.history if m["role"] == "user"]
    assert users == ["$greetings Bob", "/unknown thing"]


def test_malformed_skill_never_breaks_a_session(project: Path) -> None:
    """A broken SKILL.md is skipped: the session starts and lists the good skills."""
    write_skill(project / ".acpkit" / "skills", "bad2", "---\nname: x y\ndescription: d\n---\nb")
    h = agent()
    h.start(str(project))
    names = [
        c["name"] for c in h.client.of_kind("available_commands_update")[0]["availableCommands"]
    ]
    assert names == ["new", "compact", "greetings", "vulcan-salute"]


def test_configured_skill_dirs_reach_the_tool_and_the_commands(tmp_path: Path, home: Path) -> None:
    """skills.dirs (relative to the session cwd) are read by read_skill and announced."""
    write_skill(tmp_path / "shared", "s", skill_text("shared-skill", "From skills.dirs", "Body S"))
    cwd = tmp_path / "w"
    cwd.mkdir()
    turns: list[dict[str, Any]] = [
        {"tool_calls": [{"name": "read_skill", "arguments": {"name": "shared-skill"}}]},
        {"chunks": ["ok"]},
    ]
    h = agent(turns, skills_dirs=("../shared",))
    sid = h.start(str(cwd))
    names = [
        c["name"] for c in h.client.of_kind("available_commands_update")[0]["availableCommands"]
    ]
    assert names[-1] == "shared-skill"
    h.raw_prompt(sid, "/shared-skill")
    assert h.client.tool_updates()[-1]["rawOutput"] == {"output": "Body S"}
