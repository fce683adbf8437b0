"""
The conformance plugin's options read into what the suite takes: ``--acp-header`` values
and the ``--acp-tls-*`` settings.  Used by `acpkit.conformance.pytest_plugin` (to refuse
bad options at once) and by `acpkit.conformance.pytest_items` (to run the suite); it
imports nothing at import time, as the plugin promises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

    from acpkit.conformance.tls import TLSSettings

__all__ = ["headers_of", "tls_of"]


def headers_of(values: list[str]) -> list[tuple[str, str]]:
    """``--acp-header`` values as (name, value) pairs; `ValueError` names a bad one
    (by its name only: the value may be a token)."""
    headers = []
    for pair in values:
        name, colon, value = pair.partition(":")
        if not colon or not name.strip():
            raise ValueError(f"--acp-header wants NAME:VALUE, got {name.strip()!r}:…")
        headers.append((name.strip(), value.strip()))
    return headers


def tls_of(config: pytest.Config) -> TLSSettings:
    """The ``--acp-tls-*`` options (and ``ACPKIT_CONFORMANCE_INSECURE_TLS``) as settings."""
    import os

    from acpkit.conformance.tls import INSECURE_TLS_VARIABLE, TLSSettings

    return TLSSettings(
        trust_root=config.getoption("--acp-tls-trust-root"),
        certificate=config.getoption("--acp-tls-certificate"),
        private_key=config.getoption("--acp-tls-private-key"),
        insecure=os.environ.get(INSECURE_TLS_VARIABLE) == "1",
    )
