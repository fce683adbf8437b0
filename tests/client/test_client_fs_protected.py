"""fs/write_text_file refuses the files that decide what runs next (client security)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from acpkit import schema
from acpkit.errors import InvalidParams
from acpkit.testing.pair import connected_pair
from acpkit_client.fs import FileAccess, OverlayBufferProvider, protected_write_reason
from tests.helpers import write_through


@pytest.fixture
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A short path: the refusal's reason is clipped at 200 characters, path included, and
    # the tests look for its last words (a test-named directory under an xdist worker's
    # temporary directory made the path long enough to cut them).
    project = tmp_path_factory.mktemp("p")
    (project / ".git" / "hooks").mkdir(parents=True)
    (project / ".acpkit").mkdir()
    (project / ".acpkit" / "acp.toml").write_text("[agents]\n", encoding="utf-8")
    return project


PROTECTED = [
    ".acpkit/acp.toml",
    ".acpkit/agent.toml",
    ".git/hooks/pre-commit",
    ".git/hooks/sub/dir/post-checkout",
    ".git/config",
    "sub/project/.acpkit/acp.toml",
    ".GIT/Hooks/pre-push",
]


@pytest.mark.parametrize("relative", PROTECTED)
def test_writes_to_protected_files_are_refused_by_default(root: Path, relative: str) -> None:
    """
    An agent's write to .acpkit/acp.toml, .acpkit/agent.toml, .git/config or anything
    under .git/hooks/ is refused with -32602 naming the path and why; nothing is written.
    """
    access = FileAccess([str(root)])
    target = root / relative
    before = target.read_bytes() if target.exists() else None
    with pytest.raises(InvalidParams) as caught:
        write_through(access, str(target), "evil")
    error = caught.value
    assert error.code == -32602
    assert error.data["path"] == "$.params.path"
    assert str(target) in error.message and "is protected" in error.message
    assert "run" in error.message  # the why: it decides what runs
    assert (target.read_bytes() if target.exists() else None) == before


def test_symlink_to_a_protected_file_is_refused(root: Path) -> None:
    """A link inside the project pointing at a hook is resolved first, then refused."""
    access = FileAccess([str(root)])
    os.symlink(root / ".git" / "hooks" / "pre-commit", root / "innocent.sh")
    os.symlink(root / ".acpkit", root / "settings")
    with pytest.raises(InvalidParams):
        write_through(access, str(root / "innocent.sh"))
    with pytest.raises(InvalidParams):
        write_through(access, str(root / "settings" / "acp.toml"))
    assert not (root / ".git" / "hooks" / "pre-commit").exists()


def test_open_buffers_of_protected_files_are_refused_too(root: Path) -> None:
    """An editor buffer holding acp.toml is not a way around the rule."""
    path = str(root / ".acpkit" / "acp.toml")
    buffers = OverlayBufferProvider({path: ("[agents]\n", False)})
    access = FileAccess([str(root)], buffers)
    with pytest.raises(InvalidParams):
        write_through(access, path, "evil")
    assert buffers.open_buffers[path] == ("[agents]\n", False)


def test_ordinary_files_and_look_alikes_are_written(root: Path) -> None:
    """Other files, also ones with similar names, are written as before; reads work."""
    access = FileAccess([str(root)])
    for relative in ["src/a.py", ".acpkit/notes.md", "git/hooks/x", ".github/hooks/y", "hooks"]:
        write_through(access, str(root / relative), "ok")
        assert (root / relative).read_text(encoding="utf-8") == "ok"
    content = access.read_text_file(
        schema.ReadTextFileRequest(session_id="s", path=str(root / ".acpkit" / "acp.toml"))
    ).content
    assert content == "[agents]\n"
    for look_alike in (".gitx/hooks/a", ".gitignore", "git/config", ".github/hooks/b"):
        assert protected_write_reason(str(root / look_alike)) is None


def test_allow_protected_writes_lets_them_through(root: Path) -> None:
    """FileAccess(allow_protected_writes=True) writes protected files as asked."""
    access = FileAccess([str(root)], allow_protected_writes=True)
    write_through(access, str(root / ".git" / "hooks" / "pre-commit"), "#!/bin/sh\n")
    assert (root / ".git" / "hooks" / "pre-commit").read_text(encoding="utf-8") == "#!/bin/sh\n"


def test_refusal_on_the_wire_names_the_path(root: Path) -> None:
    """Through a real connection the agent gets -32602 with the path in the message."""
    from acpkit.connection import Agent, Client
    from acpkit.errors import RPCError

    access = FileAccess([str(root)])

    class FsClient(Client):
        def write_text_file(
            self, params: schema.WriteTextFileRequest
        ) -> schema.WriteTextFileResponse:
            return access.write_text_file(params)

    class Minimal(Agent):
        def initialize(self, params: schema.InitializeRequest) -> schema.InitializeResponse:
            return schema.InitializeResponse(protocol_version=1)

    pair = connected_pair(Minimal(), FsClient())
    pair.result(pair.client.initialize())
    target = str(root / ".acpkit" / "acp.toml")
    request = {"sessionId": "s", "path": target, "content": "evil"}
    with pytest.raises(RPCError) as caught:
        pair.result(pair.agent.protocol.request("fs/write_text_file", request))
    assert caught.value.code == -32602
    assert target in caught.value.message
