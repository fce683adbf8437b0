"""The ``acpkit`` package itself: cheap to import, and its shortcuts are the real names."""

import importlib
import subprocess
import sys

import pytest

import acpkit


def test_every_shortcut_is_the_name_of_its_module() -> None:
    """Each name in acpkit.__all__ is the very object its defining module exports."""
    assert sorted(acpkit.__all__) == sorted(["__version__", *acpkit._WHERE])
    for name in acpkit.__all__:
        if name == "__version__":
            continue
        where = acpkit._WHERE[name]
        module = importlib.import_module(where)
        expected = module if where.endswith("." + name) else getattr(module, name)
        assert getattr(acpkit, name) is expected, name


def test_unknown_name_is_an_attribute_error() -> None:
    """A name acpkit does not have raises AttributeError, as for any module."""
    try:
        acpkit.nothing_here  # noqa: B018
    except AttributeError as e:
        assert "nothing_here" in str(e)
    else:
        raise AssertionError("no AttributeError")


@pytest.mark.process
def test_import_acpkit_loads_no_layer() -> None:
    """``import acpkit`` alone imports neither Twisted nor the generated models."""
    code = (
        "import sys, acpkit; "
        "print(sorted(m for m in sys.modules if m.startswith(('twisted', 'acpkit.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['acpkit._version']"


def test_connection_semantics_table_has_one_row_per_situation() -> None:
    """
    The protocol-semantics table of ``acpkit.connection``'s docstring (its API page)
    parses as one row per situation, each with its whole text: a multi-line cell is not
    read as extra rows.
    """
    import ast
    from pathlib import Path

    import pytest

    pytest.importorskip("docutils")
    from docutils import nodes
    from docutils.core import publish_doctree

    source = Path(acpkit.__file__).parent / "connection" / "__init__.py"
    docstring = ast.get_docstring(ast.parse(source.read_text()))
    assert docstring is not None
    # Sphinx's roles are unknown to plain docutils: keep their text.
    doctree = publish_doctree(
        docstring.replace(":func:", "").replace(":class:", ""),
        settings_overrides={"report_level": 5, "halt_level": 5},
    )
    # The semantics table (the docstring also lists the package's modules, in a table).
    (table,) = [
        table
        for table in doctree.findall(nodes.table)
        if next(iter(table.findall(nodes.row))).children[0].astext() == "situation"
    ]
    rows = [row for row in table.findall(nodes.row)]
    first_cells = [row.children[0].astext().replace("\n", " ") for row in rows]
    assert first_cells == [
        "situation",
        "session/cancel while a turn runs",
        "session/cancel before the turn started",
        "the client calls cancel()",
        "an agent sends updates for a session before its session/new response",
        "a client receives updates for a session it does not know yet",
        "a method the implementation lacks",
        "the peer stops reading our output",
        "an async def handler on the asyncio reactor",
        "the connection ends",
    ]
    assert all(len(row.children) == 2 and row.children[1].astext() for row in rows)
