"""
The protocol versions acpkit speaks, and the version an agent answers ``initialize`` with.
"""

from __future__ import annotations

from acpkit import schema

__all__ = [
    "LATEST_PROTOCOL_VERSION",
    "SUPPORTED_PROTOCOL_VERSIONS",
    "ProtocolVersionError",
    "negotiate_version",
]

#: Protocol versions acpkit speaks, oldest first.
SUPPORTED_PROTOCOL_VERSIONS: tuple[int, ...] = (schema.PROTOCOL_VERSION,)
#: The version acpkit offers and answers with when the peer's is unsupported.
LATEST_PROTOCOL_VERSION: int = SUPPORTED_PROTOCOL_VERSIONS[-1]


def negotiate_version(requested: int) -> int:
    """
    The version an agent answers to ``initialize``: the client's when we support it,
    otherwise our latest (ACP: initialization).
    """
    return requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION


class ProtocolVersionError(Exception):
    """The agent answered ``initialize`` with a protocol version we do not speak."""

    def __init__(self, version: object) -> None:
        super().__init__(
            f"the agent speaks ACP protocol version {version!r}; acpkit speaks "
            f"{', '.join(map(str, SUPPORTED_PROTOCOL_VERSIONS))}: connection closed"
        )
        self.version = version
