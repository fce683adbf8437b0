"""
docs/how-to/install.md's table of extras says what ``setup.cfg`` declares: each row's
dependencies are exactly that extra's requirements (the core's for the row without an
extra), and every extra of ``setup.cfg`` has a row.
"""

from __future__ import annotations

import re

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.project.test_extras import ROOT, _lines, _setup_cfg, extra_names

PAGE = ROOT / "docs" / "how-to" / "install.md"
HEADER = "| extra | what it adds | its dependencies |"


def _rows() -> list[tuple[list[str], str]]:
    """(the extras a row names, its dependencies cell) for each row of the table."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(HEADER)
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`([a-z]+)`", cells[0]) or ([""] if "none" in cells[0] else [])
        rows.append((names, cells[2]))
    return rows


def _key(requirement: Requirement) -> tuple[str, frozenset[str]]:
    return canonicalize_name(requirement.name), frozenset(requirement.extras)


def _declared(extra: str) -> set[tuple[str, frozenset[str]]]:
    config = _setup_cfg()
    value = (
        config["options"]["install_requires"]
        if extra == ""
        else config["options.extras_require"][extra]
    )
    return {_key(Requirement(line)) for line in _lines(value)}


def test_each_rows_dependencies_are_setup_cfgs() -> None:
    """A row listing dependencies lists exactly its extra's requirements in setup.cfg."""
    checked = []
    for names, cell in _rows():
        if not cell or cell.startswith("every"):
            continue
        (extra,) = names
        listed = {_key(Requirement(item.strip())) for item in cell.split(",")}
        assert listed == _declared(extra), extra or "core"
        checked.append(extra)
    assert {"", "agent", "client", "websocket", "remote", "conformance"} <= set(checked)


def test_every_extra_has_a_row() -> None:
    """Every extra of setup.cfg is in the table, and the table names no other."""
    named = {name for names, _cell in _rows() for name in names if name}
    assert named == set(extra_names())
