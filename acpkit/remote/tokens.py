"""
Bearer tokens of remote ACP: made, kept in files only their owner can read, and found
again by the clients of the same user.

A server on TCP needs a token by default, loopback included (any local user reaches
loopback); bob generates one when none is given, as Jupyter and VS Code's server do.

==========================================  ============================================
situation                                   behaviour
==========================================  ============================================
:func:`generate_token`                      32 random bytes, URL-safe base64 (43
                                            characters), from :mod:`secrets`
:func:`write_token_file`                    written to a temporary file created ``0600``
                                            in the same directory, then renamed over the
                                            path: never readable by others, never through
                                            a symlink planted at the path; missing
                                            directories are made ``0700``
:func:`read_token_file` (a server's)        one token per line (blank lines and ``#``
                                            comments skipped; several tokens, several
                                            holders); a file group or others may read is
                                            refused (``chmod 600 FILE``), as ssh does
                                            with keys; an empty one too
:func:`read_client_token`                   the first token of the file, for a client;
                                            no permission check (it is the user's own
                                            choice to send it)
:func:`default_token_path`                  ``$XDG_RUNTIME_DIR/acpkit/remote-PORT.token``,
                                            else ``$XDG_STATE_HOME`` or
                                            ``~/.local/state``: where bob writes the
                                            token it generates for a port and where a
                                            client of the same user looks for a
                                            loopback URL's token
:func:`token_for_url`                       the ``Authorization`` header for a URL: from
                                            ``token_file`` when given, else from the
                                            default file of a loopback URL's port when
                                            it exists, else none
==========================================  ============================================

No token is ever logged nor put in an error message: errors name the file.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import attrs

from acpkit.bind_policy import is_loopback_host

__all__ = [
    "TokenFileError",
    "TokenSet",
    "default_token_path",
    "generate_token",
    "read_client_token",
    "read_token_file",
    "token_for_url",
    "write_token_file",
]


class TokenFileError(ValueError):
    """A token file that cannot be used (missing, unreadable, empty, readable by others)."""


@attrs.frozen
class TokenSet:
    """
    The bearer tokens a server accepts; each token's holder is known by its position
    (``token 1``, ``token 2``...: the line of the token file), never by its value.
    """

    tokens: tuple[bytes, ...]

    def __attrs_post_init__(self) -> None:
        if not self.tokens or any(not token for token in self.tokens):
            raise ValueError("a token set needs at least one token, and no empty one")

    @classmethod
    def of(cls, token: str | bytes | Sequence[str | bytes] | TokenSet) -> TokenSet:
        """A set from one token, several, or a set."""
        if isinstance(token, TokenSet):
            return token
        many = [token] if isinstance(token, str | bytes) else list(token)
        return cls(tuple(t.encode() if isinstance(t, str) else t for t in many))

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:  # never the tokens themselves
        return f"TokenSet(<{len(self.tokens)} token(s)>)"


def generate_token() -> str:
    """A new bearer token: 32 random bytes, URL-safe base64."""
    return secrets.token_urlsafe(32)


def _state_directory() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / "acpkit"
    state = os.environ.get("XDG_STATE_HOME")
    if state and os.path.isabs(state):
        return Path(state) / "acpkit"
    return Path.home() / ".local" / "state" / "acpkit"


def default_token_path(port: int) -> Path:
    """Where a token generated for a loopback server on ``port`` is kept."""
    return _state_directory() / f"remote-{port}.token"


def write_token_file(path: Path, token: str) -> None:
    """
    Write ``token`` to ``path``, readable by its owner only (see the module docstring).
    ``OSError`` when it cannot be written.
    """
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(temporary, flags, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(token + "\n")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _token_lines(text: str) -> list[str]:
    stripped = (line.strip() for line in text.splitlines())
    return [line for line in stripped if line and not line.startswith("#")]


def read_token_file(path: Path) -> TokenSet:
    """
    The tokens a server accepts, from ``path`` (see the module docstring);
    :class:`TokenFileError` naming the file when it cannot be used.
    """
    path = Path(path)
    try:
        info = path.stat()
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise TokenFileError(f"{path}: {why}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenFileError(
            f"{path}: permissions {stat.S_IMODE(info.st_mode):04o} let other users read"
            f" the token; make it readable by its owner only: chmod 600 {path}"
        )
    lines = _token_lines(text)
    if not lines:
        raise TokenFileError(f"{path}: the file holds no token")
    return TokenSet.of(lines)


def read_client_token(path: Path) -> str:
    """The token a client sends, the first of ``path``; :class:`TokenFileError` if none."""
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise TokenFileError(f"{path}: {why}") from None
    lines = _token_lines(text)
    if not lines:
        raise TokenFileError(f"{path}: the file holds no token")
    return lines[0]


def token_for_url(url: str, token_file: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """
    The ``Authorization`` header to send to ``url`` (see the module docstring): ``{}``
    when there is no token to send.
    """
    if token_file is not None:
        return {"Authorization": f"Bearer {read_client_token(Path(token_file))}"}
    parts = urlsplit(url)
    if parts.hostname is None or not is_loopback_host(parts.hostname):
        return {}
    try:
        port = parts.port
    except ValueError:
        return {}
    if port is None:
        port = 443 if parts.scheme in ("https", "wss") else 80
    default = default_token_path(port)
    if not default.is_file():
        return {}
    try:
        return {"Authorization": f"Bearer {read_client_token(default)}"}
    except TokenFileError:
        return {}
