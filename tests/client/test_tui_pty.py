"""End to end in a real pseudo-terminal: the UI, a real agent process, the screen read back.

The screen is a ``pyte`` terminal emulator fed with everything the UI writes; each step
waits (with a timeout, never a sleep) until the expected text is on it.
"""

from __future__ import annotations

import base64
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pexpect
import pyte
import pytest

pytestmark = pytest.mark.process  # every test here starts a child process

ROOT = Path(__file__).resolve().parent.parent.parent
TINY_AGENT = ROOT / "tests" / "fixtures" / "client" / "tiny_agent.py"
COLUMNS, ROWS = 100, 30
TIMEOUT = 30.0
UI = "import sys; from acpkit_client.tui.app import main; sys.exit(main(sys.argv[1:]))"


class Terminal:
    """The UI in a pty, and the screen it draws."""

    def __init__(self, project: Path, **environ: str) -> None:
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        #: Every byte the UI wrote (OSC 52 is not kept by the screen model).
        self.raw = bytearray()
        env = dict(os.environ)
        env.update(
            PYTHONPATH=str(ROOT),
            TERM="xterm-256color",
            ACPKIT_DIR=str(project / "no-user-config"),
        )
        env.update(environ)
        env.pop("ACPKIT_TRACE", None)
        self.child = pexpect.spawn(
            sys.executable,
            ["-c", UI, "--log", str(project / "ui.log")],
            cwd=str(project),
            env=env,
            dimensions=(ROWS, COLUMNS),
        )

    @property
    def text(self) -> str:
        return "\n".join(self.screen.display)

    def wait(self, condition: Callable[[str], bool], what: str) -> str:
        deadline = time.monotonic() + TIMEOUT
        while not condition(self.text):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {what}; screen:\n{self.text}")
            try:
                data = self.child.read_nonblocking(65536, timeout=min(left, 1.0))
                self.raw.extend(data)
                self.stream.feed(data)
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                if condition(self.text):
                    break
                raise AssertionError(
                    f"the UI ended waiting for {what}; screen:\n{self.text}"
                ) from None
        return self.text

    def wait_for(self, text: str) -> str:
        return self.wait(lambda screen: text in screen, repr(text))

    def send(self, keys: str) -> None:
        self.child.send(keys.encode("utf-8"))

    def wait_exit(self) -> int:
        deadline = time.monotonic() + TIMEOUT
        while self.child.isalive():
            if time.monotonic() > deadline:
                raise AssertionError(f"the UI did not exit; screen:\n{self.text}")
            try:
                self.stream.feed(self.child.read_nonblocking(65536, timeout=1.0))
            except (pexpect.TIMEOUT, pexpect.EOF):
                pass
        self.child.close()
        return int(self.child.exitstatus if self.child.exitstatus is not None else -1)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)


def children_of(pid: int) -> list[int]:
    """The live (not zombie) processes whose parent is ``pid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8") as stream:
                stat = stream.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(name))
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stream:
            return stream.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / ".acpkit").mkdir()
    (tmp_path / ".acpkit" / "agent.toml").write_text("yolo = false\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("some notes\n", encoding="utf-8")
    yield tmp_path


def test_reference_agent_mention_permission_answer_and_close(project: Path) -> None:
    """Open bob from the menu, prompt with an @ mention and a command to run, approve it in
    the modal, read the answer, close the window with Ctrl-W: the agent process is gone."""
    terminal = Terminal(project)
    try:
        terminal.wait_for(" Agent  Window ")
        terminal.send("\x1ba")
        terminal.wait_for("Create agents file")
        terminal.send("\r")
        terminal.wait_for("[x] 1 Bob (reference agent)")
        terminal.wait(lambda s: "starting" not in s, "the agent to be ready")
        terminal.send("look at @no")
        terminal.wait_for(" notes.txt ")
        terminal.send("\t")
        terminal.wait_for("look at @notes.txt")
        terminal.send("\x1b\r")
        terminal.send("run: echo $((6*7))-done")
        terminal.wait_for("run: echo $((6*7))-done")
        terminal.send("\r")
        terminal.wait_for("asks permission")
        screen = terminal.wait_for("< Allow")
        assert "command:" in screen and "echo $((6*7))-done" in screen
        terminal.send("\r")
        screen = terminal.wait_for("42-done")
        terminal.wait_for("[completed]")
        assert "you" in screen and "look at @notes.txt" in screen
        assert " / 32,768 tokens" in terminal.text
        terminal.send("\t\x03")
        terminal.wait_for("2 lines copied")
        assert (
            b"\x1b]52;c;" + base64.b64encode(b"1 tool result(s):\n- bash: 42-done\n")
            in terminal.raw
        )
        agents = children_of(terminal.child.pid)
        assert agents, "the agent process runs"
        terminal.send("\x17")
        terminal.wait_for("Bob (reference agent) stopped")
        assert "No agent window is open" in terminal.text
        assert not [pid for pid in agents if alive(pid)]
        terminal.send("\x11")
        assert terminal.wait_exit() == 0
    finally:
        terminal.close()


def test_slash_list_from_an_agent_announcing_commands(project: Path) -> None:
    """An agent that announces commands: / lists them, Tab completes, the command is sent
    as text, Esc in the permission modal rejects once."""
    (project / ".acpkit" / "acp.toml").write_text(
        f'[[agent]]\nname = "Tiny"\ncommand = {sys.executable!r}\n'.replace("'", '"')
        + f"args = [{str(TINY_AGENT)!r}]\n".replace("'", '"'),
        encoding="utf-8",
    )
    terminal = Terminal(project)
    try:
        terminal.wait_for(" Agent  Window ")
        terminal.send("\x1ba")
        terminal.wait_for("Agent status")
        terminal.send("\r")
        terminal.wait_for("[x] 1 Tiny")
        terminal.wait(lambda s: "starting" not in s, "the agent to be ready")
        terminal.send("/")
        screen = terminal.wait_for("/web  Search the web <query>")
        assert "/help  Show help" in screen
        terminal.send("w\t")
        terminal.wait(lambda s: "Search the web" not in s, "the list to close")
        terminal.send("acp\r")
        terminal.wait_for("Tiny asks permission")
        terminal.send("\x1b")
        screen = terminal.wait_for("echo: /web acp")
        assert "permission refused" in screen
        assert "Write out.txt (edit) [failed]" in screen
        terminal.send("\x11")
        assert terminal.wait_exit() == 0
    finally:
        terminal.close()


@pytest.mark.process
def test_a_terminal_that_is_not_utf8_gets_only_ascii(project: Path) -> None:
    """
    With ``LC_ALL=C`` the UI writes no byte outside ASCII: frames are drawn with the
    terminal's line-drawing set, the UI's own glyphs are ASCII ones.
    """
    terminal = Terminal(project, LC_ALL="C")
    try:
        terminal.wait_for(" Agent  Window ")
        terminal.send("\x1ba")
        terminal.wait_for("Create agents file")
        terminal.send("\r")
        terminal.wait_for("[x] 1 Bob (reference agent)")
        screen = terminal.wait_for("[#]")
        assert "[■]" not in screen
        assert all(byte < 0x80 for byte in terminal.raw), sorted(
            {byte for byte in terminal.raw if byte >= 0x80}
        )
        terminal.send("\x17")  # Ctrl-W closes the window
    finally:
        terminal.close()
