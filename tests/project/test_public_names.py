"""The public names: ``__all__`` of each public module is complete, importable and documented."""

from __future__ import annotations

import importlib
import subprocess
import sys
import typing
from pathlib import Path
from types import ModuleType

import pytest

import acpkit
from acpkit import builders, schema, unstable

ROOT = Path(__file__).resolve().parent.parent.parent
API_PAGES = ROOT / "docs" / "reference" / "api"

_MODULES_WITH_ALL = [
    "acpkit",
    "acpkit.builders",
    "acpkit.codec",
    "acpkit.connection",
    "acpkit.io",
    "acpkit.errors",
    "acpkit.framing",
    "acpkit.jsonrpc",
    "acpkit.schema",
    "acpkit.testing.pair",
    "acpkit.unstable",
]


@pytest.mark.parametrize("name", _MODULES_WITH_ALL)
def test_every_name_in_all_exists(name: str) -> None:
    """Every name a public module lists in ``__all__`` is an attribute of it, and
    ``from <module> import *`` imports them all."""
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    if exported is None:
        pytest.skip(f"{name} has no __all__")
    missing = [n for n in exported if not hasattr(module, n)]
    assert missing == []
    assert len(set(exported)) == len(exported)
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)
    assert set(exported) <= set(namespace)


def _defined_public_names(module: ModuleType) -> set[str]:
    """Public names of a generated module, less what it imports for its own use."""
    imported = {"annotations", "attrs", "enum", *vars(typing)}
    return {
        n
        for n, v in vars(module).items()
        if not n.startswith("_") and n not in imported and not isinstance(v, ModuleType)
    }


@pytest.mark.parametrize("module", [schema, unstable], ids=["schema", "unstable"])
def test_generated_modules_export_every_public_name(module: ModuleType) -> None:
    """``acpkit.schema`` and ``acpkit.unstable`` list every model, alias, enum, runtime name
    and method table in ``__all__`` (sorted), and nothing else."""
    assert set(module.__all__) == _defined_public_names(module)
    assert module.__all__ == sorted(module.__all__)
    for name in ("AGENT_METHODS", "CLIENT_METHODS", "ABSENT", "TextContentBlock", "SessionUpdate"):
        assert name in module.__all__
    assert "Usage" in unstable.__all__ and "Usage" not in schema.__all__


def test_generated_classes_are_documented() -> None:
    """Every class the generated modules export carries a docstring."""
    for module in (schema, unstable):
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type):
                assert (value.__doc__ or "").strip(), f"{module.__name__}.{name}"


@pytest.mark.process
def test_dir_lists_the_public_names_without_importing_them() -> None:
    """``dir(acpkit)`` includes every name of ``acpkit.__all__`` (the lazily imported ones
    too), and listing them imports nothing."""
    assert set(acpkit.__all__) <= set(dir(acpkit))
    code = (
        "import sys, acpkit\n"
        "names = dir(acpkit)\n"
        "assert 'AgentConnection' in names and 'serve_stdio' in names, names\n"
        "assert 'acpkit.connection' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def _documenting_modules(value: object, name: str) -> set[str]:
    """
    The modules whose ``automodule`` documents ``value``: the module that defines it, and
    each package above it that lists it in ``__all__`` (autodoc documents the names of a
    module's ``__all__``, those it imports included).
    """
    where = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", "")
    found = {where}
    parts = where.split(".")
    for depth in range(1, len(parts)):
        package = importlib.import_module(".".join(parts[:depth]))
        if name in getattr(package, "__all__", ()) and getattr(package, name, None) is value:
            found.add(package.__name__)
    return found


def test_top_level_names_are_documented() -> None:
    """Each name of ``acpkit.__all__`` has a docstring and a page of the API reference
    (``docs/reference/api``) documents it with ``automodule``: of its defining module, or
    of a package that exports it (the layers' packages, ``acpkit.jsonrpc``...)."""
    pages = {p.read_text(encoding="utf-8") for p in API_PAGES.glob("*.md")}
    for name in acpkit.__all__:
        if name == "__version__":
            continue
        value = getattr(acpkit, name)
        assert (value.__doc__ or "").strip(), name
        modules = _documenting_modules(value, name) - {"acpkit"}
        assert any(f"automodule:: {where}\n" in page for page in pages for where in modules), (
            name,
            modules,
        )


def test_builders_are_documented() -> None:
    """Each builder has a docstring and a row in the models-and-codec reference."""
    reference = (ROOT / "docs" / "reference" / "codec.md").read_text(encoding="utf-8")
    builders_section = reference.split("## Builders", 1)[1].split("\n## ", 1)[0]
    for name in builders.__all__:
        assert (getattr(builders, name).__doc__ or "").strip(), name
        assert f"`{name}" in builders_section, name
