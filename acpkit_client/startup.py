"""
How acpkit's commands import their modules: :func:`startup_imports`.

It lives apart from :mod:`acpkit_client.launch` (which imports the commands) so that the
commands can use it without importing their launcher; it imports nothing but the
standard library (``acpkit_client/__init__.py`` imports nothing either).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["startup_imports"]


@contextmanager
def startup_imports() -> Iterator[None]:
    """
    Import a command's modules without the cyclic garbage collector, then put what they
    made out of its reach.  Importing acpkit makes objects by the hundred thousand (the
    models' classes, their generated methods, the codec's tables), and the collector, run
    every few hundred allocations, walked them again and again: 140 collections while bob
    imports, about a tenth of its import time.  Those objects live until the process exits:
    after one collection (the few hundred cycles the imports left), ``gc.freeze`` moves them
    to the permanent generation, where neither the later collections nor the ones Python
    makes while it shuts down (about 30 ms) walk them.  The collector is left as it was
    found (enabled, unless the caller had disabled it).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
        if enabled:
            gc.enable()
