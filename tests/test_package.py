"""The ``acpkit`` package itself: cheap to import, and its shortcuts are the real names."""

import importlib
import subprocess
import sys

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


def test_import_acpkit_loads_no_layer() -> None:
    """``import acpkit`` alone imports neither Twisted nor the generated models."""
    code = (
        "import sys, acpkit; "
        "print(sorted(m for m in sys.modules if m.startswith(('twisted', 'acpkit.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['acpkit._version']"
