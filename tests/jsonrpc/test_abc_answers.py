"""``acpkit.jsonrpc.abc_answers.ABCAnswers``: ``isinstance`` against an ABC, type by type."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from acpkit.jsonrpc.abc_answers import ABCAnswers


class Table(Mapping[str, int]):
    def __getitem__(self, key: str) -> int:
        return 0

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


class Plain:
    pass


def test_answers_are_isinstances_asked_once_or_many_times() -> None:
    """Each answer is ``isinstance``'s, the first time and from the cache after."""
    is_mapping = ABCAnswers(Mapping)
    values: list[Any] = [{}, Table(), Plain(), None, "s", [1]]
    for _ in range(3):
        assert [is_mapping(v) for v in values] == [isinstance(v, Mapping) for v in values]


def test_a_later_registration_changes_the_answer() -> None:
    """A type remembered as not a Mapping is one once registered as such."""

    class Late:
        pass

    is_mapping = ABCAnswers(Mapping)
    assert not is_mapping(Late())
    Mapping.register(Late)
    assert is_mapping(Late())


def test_a_proxy_is_asked_directly() -> None:
    """An object whose ``__class__`` is not its type is never answered from the cache."""

    class Proxy:
        @property  # type: ignore[misc]
        def __class__(self) -> type:
            return Table

    is_mapping = ABCAnswers(Mapping)
    assert not is_mapping(object())
    assert is_mapping(Proxy()) is isinstance(Proxy(), Mapping) is True
