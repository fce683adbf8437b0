"""
The commands import their modules without the cyclic garbage collector and freeze what
the imports made (``acpkit_client.startup.startup_imports``): the collector is back on
afterwards, and the imported objects are in its permanent generation.

Each test runs in a fresh interpreter: freezing this one's heap would change the suite's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def run_fresh(code: str) -> list[str]:
    """What a fresh interpreter running ``code`` (with this tree first) prints, split."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env,
        timeout=120,
    ).stdout  # fmt: skip
    return output.split()


@pytest.mark.process
def test_startup_imports_freezes_and_restores_the_collector() -> None:
    """
    Inside ``startup_imports`` the collector is off; after it, it is on again, what was
    imported is frozen, and the garbage the imports left was collected first.
    """
    code = (
        "import gc\n"
        "from acpkit_client.startup import startup_imports\n"
        "with startup_imports():\n"
        "    inside = gc.isenabled()\n"
        "    class Cycle: pass\n"
        "    c = Cycle(); c.me = c; del c\n"  # garbage: collected before the freeze
        "    import acpkit.schema\n"
        "print(inside, gc.isenabled(), gc.get_freeze_count() > 1000,\n"
        "      any(type(o).__name__ == 'Cycle' for o in gc.get_objects()))\n"
    )
    assert run_fresh(code) == ["False", "True", "True", "False"]


@pytest.mark.process
def test_startup_imports_leaves_a_disabled_collector_disabled() -> None:
    """A caller that had turned the collector off finds it off afterwards."""
    code = (
        "import gc\n"
        "from acpkit_client.startup import startup_imports\n"
        "gc.disable()\n"
        "with startup_imports():\n"
        "    pass\n"
        "print(gc.isenabled())\n"
    )
    assert run_fresh(code) == ["False"]


@pytest.mark.process
def test_bob_imports_its_modules_frozen() -> None:
    """bob's twistd module imports bob's modules frozen; the collector is on afterwards."""
    code = (
        "import gc\n"
        "import acpkit_agent.twistd_entry\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 10000)\n"
    )
    assert run_fresh(code) == ["True", "True"]
