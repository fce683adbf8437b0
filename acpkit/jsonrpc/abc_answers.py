"""
:class:`ABCAnswers`: ``isinstance(value, SomeABC)`` answered from a per-type cache.

An ``isinstance`` check against an abstract base class (``Mapping``, ``Awaitable``, and
every ``Generic`` subclass of one, such as Twisted's ``Deferred``) goes through
``ABCMeta.__instancecheck__``, a Python-level call, even when its answer is cached.  On a
path run once per message the type's answer is kept in a set instead.  It is exactly
``isinstance``'s: the sets are emptied when an ABC registration changes
(``abc.get_cache_token()``, which is what ``ABCMeta``'s own cache follows), and an object
whose ``__class__`` is not its type (a proxy) is always asked directly.
"""

from __future__ import annotations

from abc import get_cache_token
from typing import Any

__all__ = ["ABCAnswers"]


class ABCAnswers:
    """``answers(value)`` is ``isinstance(value, abc)`` (see the module docstring)."""

    #: At most this many types are remembered (each way).
    KEPT = 1024

    def __init__(self, abc: type) -> None:
        self._abc = abc
        self._yes: set[type] = set()
        self._no: set[type] = set()
        self._token = get_cache_token()

    def __call__(self, value: Any) -> bool:
        kind = type(value)
        if value.__class__ is not kind:
            return isinstance(value, self._abc)
        token = get_cache_token()
        if token != self._token:
            self._yes.clear()
            self._no.clear()
            self._token = token
        if kind in self._no:
            return False
        if kind in self._yes:
            return True
        answer = isinstance(value, self._abc)
        known = self._yes if answer else self._no
        if len(known) < self.KEPT:
            known.add(kind)
        return answer
