"""
The skill catalog of the reference agent: procedures the model reads with ``read_skill``.

A skill is a directory holding a ``SKILL.md``: a YAML front matter block (between two
``---`` lines, read with ``yaml.safe_load``) with ``name`` and ``description``, then the
body, the procedure itself::

    ---
    name: greetings
    description: >
      Greet somebody
      with a festive message.
    ---
    1. Ask who to greet when no name was given. ...

Folded (``>``) and literal (``|``) scalars, quoted strings, comments, block lists and any
other keys are YAML's; ``name`` and ``description`` must be text (a scalar, taken as
written).  A block that is not valid YAML but is plain ``key: value`` lines, the subset
earlier versions read (``description: Use it when: the user asks``), is still read as such.

Skills are looked up, in order, in ``<cwd>/.acpkit/skills/``, ``~/.config/acpkit/skills/``
and the ``skills.dirs`` of the configuration (relative ones against the cwd); the first
skill of a name wins. A malformed skill is skipped and reported (:attr:`SkillCatalog.problems`,
shown on the startup banner), never fatal.

Skills are announced as slash commands after ``new`` and ``compact``; ``/greetings Bob`` is
rewritten to ``$greetings Bob`` (:func:`rewrite_skill_command`) and the turn runs normally:
the model calls ``read_skill``. A skill named like a built-in command is not announced.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    import yaml

__all__ = [
    "RESERVED_NAMES",
    "SKILL_FILE",
    "SKILL_HINT",
    "Skill",
    "SkillCatalog",
    "SkillError",
    "SkillLibrary",
    "catalog_banner_lines",
    "load_catalog",
    "parse_skill",
    "rewrite_skill_command",
    "skill_dirs",
    "skills_prompt",
]

SKILL_FILE = "SKILL.md"
SKILL_HINT = "parameters, if this skill needs any"
"""``input.hint`` of every skill command."""
RESERVED_NAMES = frozenset({"new", "compact"})
"""Built-in slash commands: a skill with one of these names is never announced."""
TEXT_FIELDS = ("name", "description")
"""Front matter keys read as text: a scalar is taken as written, a list or mapping refused."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_KEY_VALUE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:\s*(.*)$")
_SKILL_REFERENCE = re.compile(r"^\s*[/$]([A-Za-z0-9][A-Za-z0-9_.-]*)(?=\s|$)")


class SkillError(ValueError):
    """A ``SKILL.md`` that cannot be used; the message says why (without the path)."""


@attrs.frozen
class Skill:
    """One skill: its name, description, procedure (body) and the file it came from."""

    name: str
    description: str
    body: str
    path: str


@attrs.frozen
class SkillProblem:
    """A skill that was skipped (malformed, duplicated) or not announced (reserved name)."""

    path: str
    reason: str


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _one_line(error: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where (line and column of the file)."""
    problem = getattr(error, "problem", None)
    mark = getattr(error, "problem_mark", None)
    text = str(problem) if problem else " ".join(str(error).split())
    if mark is not None:
        # the block starts on the file's second line (after the opening '---')
        text += f" (line {mark.line + 2}, column {mark.column + 1})"
    return text


def _subset_fields(lines: Sequence[str]) -> dict[str, Any]:
    """
    The front matter read as plain ``key: value`` lines, the subset earlier versions read:
    the compatibility reading of a block that is not valid YAML (``description: Use it
    when: …``).  Raises :class:`SkillError` when a line is not ``key: value``.
    """
    fields: dict[str, Any] = {}
    for number, line in enumerate(lines, start=2):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _KEY_VALUE.match(stripped)
        if match is None:
            raise SkillError(f"front matter line {number} is not 'key: value': {stripped!r}")
        key, value = match.groups()
        if key in fields:
            raise SkillError(f"front matter key {key!r} is given twice")
        fields[key] = _unquote(value)
    return fields


def _yaml_fields(block: str) -> dict[str, Any]:
    """
    The front matter read as YAML (``yaml.safe_load``): a mapping, each key once.  A text
    field (:data:`TEXT_FIELDS`) given as a scalar is its text as written, whatever type YAML
    would resolve (``name: 1.10`` is ``"1.10"``, not a number); ``yaml.YAMLError`` when the
    block is not valid YAML.
    """
    import yaml  # on the first skill read: bob without skills does not load PyYAML

    document = yaml.safe_load(block)
    if document is None:
        return {}
    if not isinstance(document, dict):
        kind = "a list" if isinstance(document, list) else f"a single {type(document).__name__}"
        raise SkillError(f"the front matter is not 'key: value' pairs (it reads as {kind})")
    root = yaml.compose(block, Loader=yaml.SafeLoader)
    nodes: dict[str, yaml.Node] = {}
    if isinstance(root, yaml.MappingNode):
        for key_node, value_node in root.value:
            key = str(key_node.value)
            if key in nodes:
                raise SkillError(f"front matter key {key!r} is given twice")
            nodes[key] = value_node
    fields = {str(key): value for key, value in document.items()}
    for key in TEXT_FIELDS:
        node = nodes.get(key)
        if node is None:
            continue
        if not isinstance(node, yaml.ScalarNode):
            kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
            raise SkillError(f"the front matter's {key!r} is {kind}, not text")
        fields[key] = str(node.value)
    return fields


def parse_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """
    Split a ``SKILL.md`` into its front matter (a YAML mapping) and its body.

    The block between the two ``---`` lines is read with ``yaml.safe_load``; a block that is
    not valid YAML but is plain ``key: value`` lines (the subset earlier versions read, e.g.
    ``description: Use it when: …``) is read as such.  Raises :class:`SkillError` when the
    text does not start with a ``---`` block closed by another ``---`` line, when the block
    is neither, when it is not a mapping, or when a key is given twice.
    """
    lines = text.lstrip("\ufeff").splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise SkillError("no front matter (the file must start with a '---' line)")
    for index, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            block_lines = lines[1:index]
            body = "".join(lines[index + 1 :]).strip("\n")
            break
    else:
        raise SkillError("the front matter is not closed by a '---' line")
    import yaml  # see _yaml_fields

    try:
        return _yaml_fields("".join(block_lines)), body
    except yaml.YAMLError as error:
        try:
            return _subset_fields(block_lines), body
        except SkillError:
            pass
        raise SkillError(f"the front matter is not valid YAML: {_one_line(error)}") from None


def parse_skill(text: str, path: str) -> Skill:
    """A skill from the text of its ``SKILL.md``; :class:`SkillError` when malformed."""
    fields, body = parse_front_matter(text)
    name = fields.get("name") or ""
    description = " ".join((fields.get("description") or "").split())
    if not name:
        raise SkillError("the front matter has no 'name'")
    if _NAME.fullmatch(name) is None:
        raise SkillError(
            f"the name {name!r} is not a command name (letters, digits, '-', '_', '.')"
        )
    if not description:
        raise SkillError("the front matter has no 'description'")
    if not body.strip():
        raise SkillError("the body (the procedure) is empty")
    return Skill(name=name, description=description, body=body, path=path)


def skill_dirs(cwd: str, extra: Sequence[str] = (), home: str | None = None) -> list[str]:
    """The directories looked up for skills, in order of precedence."""
    home = home if home is not None else os.path.expanduser("~")
    dirs = [
        os.path.join(cwd, ".acpkit", "skills"),
        os.path.join(home, ".config", "acpkit", "skills"),
    ]
    for directory in extra:
        expanded = os.path.expanduser(directory)
        dirs.append(os.path.normpath(os.path.join(cwd, expanded)))
    unique: list[str] = []
    for directory in dirs:
        if directory not in unique:
            unique.append(directory)
    return unique


@attrs.frozen
class SkillCatalog:
    """The skills found (sorted by name) and the problems met while looking."""

    skills: tuple[Skill, ...] = ()
    problems: tuple[SkillProblem, ...] = ()

    def __iter__(self) -> Iterator[Skill]:
        return iter(self.skills)

    def __len__(self) -> int:
        return len(self.skills)

    def get(self, name: str) -> Skill | None:
        """The skill called ``name``, or None."""
        for skill in self.skills:
            if skill.name == name:
                return skill
        return None

    def names(self) -> list[str]:
        """The skill names, sorted."""
        return [skill.name for skill in self.skills]

    def announced(self) -> list[Skill]:
        """The skills announced as slash commands (reserved names left out)."""
        return [skill for skill in self.skills if skill.name not in RESERVED_NAMES]


def load_catalog(dirs: Iterable[str]) -> SkillCatalog:
    """Read every ``<dir>/<skill>/SKILL.md``; malformed and duplicate skills become problems."""
    found: dict[str, Skill] = {}
    problems: list[SkillProblem] = []
    for directory in dirs:
        try:
            entries = sorted(os.listdir(directory))
        except FileNotFoundError:
            continue
        except OSError as error:
            problems.append(SkillProblem(directory, f"cannot be listed ({_why(error)})"))
            continue
        for entry in entries:
            path = os.path.join(directory, entry, SKILL_FILE)
            if not os.path.isfile(path):
                continue
            try:
                with open(path, encoding="utf-8") as stream:
                    skill = parse_skill(stream.read(), path)
            except SkillError as error:
                problems.append(SkillProblem(path, str(error)))
                continue
            except UnicodeDecodeError:
                problems.append(SkillProblem(path, "is not valid UTF-8"))
                continue
            except OSError as error:
                problems.append(SkillProblem(path, f"cannot be read ({_why(error)})"))
                continue
            first = found.get(skill.name)
            if first is not None:
                problems.append(
                    SkillProblem(path, f"skill {skill.name!r} is already defined by {first.path}")
                )
                continue
            found[skill.name] = skill
    for name in sorted(RESERVED_NAMES & found.keys()):
        problems.append(
            SkillProblem(
                found[name].path,
                f"skill {name!r} is not announced: /{name} is a built-in command "
                f"(use ${name} to run the skill)",
            )
        )
    skills = tuple(found[name] for name in sorted(found))
    return SkillCatalog(skills=skills, problems=tuple(problems))


def _why(error: OSError) -> str:
    return error.strerror or str(error)


@attrs.frozen
class SkillLibrary:
    """
    Where skills are looked up: the configured extra directories and the home directory
    (None: ``~`` at each lookup). :meth:`catalog` reads the catalog of a cwd afresh.
    """

    extra_dirs: tuple[str, ...] = ()
    home: str | None = None

    def dirs(self, cwd: str) -> list[str]:
        """The directories looked up for ``cwd``."""
        return skill_dirs(cwd, self.extra_dirs, self.home)

    def catalog(self, cwd: str) -> SkillCatalog:
        """The catalog seen from ``cwd`` (read from disk now)."""
        return load_catalog(self.dirs(cwd))


def catalog_banner_lines(catalog: SkillCatalog) -> list[str]:
    """The banner lines about skills: the names found, then each problem."""
    names = ", ".join(catalog.names())
    lines = [f"  skills:      {len(catalog)}" + (f" ({names})" if names else "")]
    for problem in catalog.problems:
        lines.append(f"  skill skipped: {problem.path}: {problem.reason}")
    return lines


def skills_prompt(catalog: SkillCatalog) -> str:
    """The part of the system prompt that explains ``$name`` and lists the catalog."""
    if not catalog.skills:
        return ""
    lines = [
        "",
        "",
        "Skills are written procedures you can follow. When the user writes $name (for "
        "example `$greetings Bob`), call the read_skill tool with that name first, then "
        "follow the procedure it returns, using the rest of the message as its parameters. "
        "Read a skill only when it is asked for or clearly needed; never guess its content. "
        "The skills:",
    ]
    for skill in catalog.skills:
        lines.append(f"- {skill.name}: {skill.description}")
    return "\n".join(lines)


def rewrite_skill_command(text: str, catalog: SkillCatalog) -> str:
    """
    ``/name rest`` for an announced skill ``name`` becomes ``$name rest``; any other text is
    returned unchanged (an unknown ``/name`` goes to the model untouched).
    """
    match = _SKILL_REFERENCE.match(text)
    if match is None or not match.group(0).lstrip().startswith("/"):
        return text
    name = match.group(1)
    skill = catalog.get(name)
    if skill is None or name in RESERVED_NAMES:
        return text
    slash = match.start(1) - 1
    return text[:slash] + "$" + text[slash + 1 :]
