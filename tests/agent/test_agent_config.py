"""
The agent's configuration file, the twistd plugin options and the startup banner: lookup
order, strict validation with errors naming the file and the key, stdout kept for frames.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from twisted.internet.task import Clock
from twisted.python import usage

from acpkit_agent.banner import banner_lines
from acpkit_agent.config import AgentConfig, ConfigError, load_config, parse_config
from acpkit_agent.tap import AgentService, Options, build_runtime, makeService, stderr_observer
from tests.helpers import write


def test_defaults_without_any_file(tmp_path: Path) -> None:
    """No config anywhere: bob, the default title, yolo, the echo engine, path None."""
    config = load_config(None, cwd=str(tmp_path), home=str(tmp_path / "home"))
    assert config == AgentConfig()
    assert (config.name, config.title, config.yolo, config.engine_name) == (
        "bob",
        "Bob (bash-first agent)",
        True,
        "echo",
    )
    assert config.path is None and config.sessions_enabled is False


def test_every_key_is_read(tmp_path: Path) -> None:
    """Every documented key reaches the AgentConfig; [engine] keeps the engine's settings."""
    path = write(
        tmp_path / "agent.toml",
        """
yolo = false
[acp]
name = "alice"
title = ""
[context]
contextWindow = 8192
keepLastTurns = 2
compactAt = 0.5
[sessions]
enabled = true
dir = "hist"
[engine]
name = "openai"
base_url = "http://127.0.0.1:1/v1"
model = "m"
""",
    )
    config = load_config(path)
    assert config == AgentConfig(
        name="alice",
        title="",
        yolo=False,
        context_window=8192,
        keep_last_turns=2,
        compact_at=0.5,
        sessions_enabled=True,
        sessions_dir="hist",
        engine_name="openai",
        engine_settings={"base_url": "http://127.0.0.1:1/v1", "model": "m"},
        path=path,
    )


def test_lookup_order(tmp_path: Path) -> None:
    """--config, then <cwd>/.acpkit/agent.toml, then ~/.config/acpkit/agent.toml."""
    cwd, home = tmp_path / "proj", tmp_path / "home"
    user = write(home / ".config" / "acpkit" / "agent.toml", '[acp]\nname = "user"\n')
    assert load_config(None, cwd=str(cwd), home=str(home)).name == "user"
    project = write(cwd / ".acpkit" / "agent.toml", '[acp]\nname = "project"\n')
    config = load_config(None, cwd=str(cwd), home=str(home))
    assert (config.name, config.path) == ("project", project)
    explicit = write(tmp_path / "x.toml", '[acp]\nname = "explicit"\n')
    assert load_config(explicit, cwd=str(cwd), home=str(home)).name == "explicit"
    assert user


@pytest.mark.parametrize(
    "text, message",
    [
        ("[context]\nkeepLastTurn = 3\n", "context.keepLastTurn is not a key this file has"),
        ("colour = 1\n", "colour is not a key this file has"),
        ('yolo = "no"\n', "yolo must be a boolean, not 'no'"),
        ("[context]\ncontextWindow = true\n", "context.contextWindow must be an integer"),
        ("[context]\ncontextWindow = -1\n", "context.contextWindow must be >= 0"),
        ("[context]\ncompactAt = 2.0\n", "context.compactAt must be in (0, 1]"),
        ("[acp]\nname = 3\n", "acp.name must be a string"),
        ("acp = 3\n", "acp must be a table"),
        ("[engine]\nname = 4\n", "engine.name must be a string"),
        ("[sessions]\nenabled = 1\n", "sessions.enabled must be a boolean"),
        ("yolo = \n", "invalid TOML"),
    ],
)
def test_bad_files_name_the_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    """An unknown key, a wrong type, a bad value or invalid TOML: ConfigError naming both."""
    path = write(tmp_path / ".acpkit" / "agent.toml", text)
    with pytest.raises(ConfigError) as caught:
        load_config(None, cwd=str(tmp_path), home=str(tmp_path))
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_unreadable_and_missing_files(tmp_path: Path) -> None:
    """A missing --config, a directory, an unreadable or non-UTF-8 file are errors."""
    with pytest.raises(ConfigError, match="no such file"):
        load_config(str(tmp_path / "nope.toml"))
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(str(tmp_path))
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"name = '\xff'\n")
    with pytest.raises(ConfigError, match=str(binary)):
        load_config(str(binary))


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that cannot be read (permission denied) is an error naming it."""
    locked = tmp_path / "locked.toml"
    locked.write_text("yolo = true\n")
    if os.geteuid() == 0:  # root reads everything: make open() refuse like chmod 0 would

        def refuse(path: str, mode: str = "r") -> object:
            raise PermissionError(13, "Permission denied", path)

        monkeypatch.setattr("acpkit_agent.config.open", refuse, raising=False)
    else:
        locked.chmod(0)
    try:
        with pytest.raises(ConfigError) as caught:
            load_config(str(locked))
        assert str(caught.value) == f"{locked}: cannot be read (Permission denied)"
    finally:
        locked.chmod(0o600)


def test_engine_settings_are_validated_by_make_engine(tmp_path: Path) -> None:
    """An unknown engine or engine setting is a startup error naming the file."""
    path = write(tmp_path / "a.toml", '[engine]\nname = "echo"\ncolour = 1\n')
    with pytest.raises(ConfigError) as caught:
        build_runtime(load_config(path), Clock())
    assert str(caught.value).startswith(f"{path}: engine: ")
    assert "colour" in str(caught.value)
    with pytest.raises(ConfigError, match="unknown engine 'gpt'"):
        build_runtime(parse_config({"engine": {"name": "gpt"}}, "x.toml"), Clock())


def test_make_service_exits_with_a_clear_message(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """makeService with a bad config writes 'acp-agent: <file>: <problem>' and exits 1."""
    path = write(tmp_path / "bad.toml", "[context]\nkeepLastTurn = 3\n")
    options = Options()
    options.parseOptions(["--config", path])
    with pytest.raises(SystemExit) as caught:
        makeService(options)
    assert caught.value.code == 1
    out, err = capfd.readouterr()
    assert out == ""
    assert f"acp-agent: {path}: context.keepLastTurn is not a key this file has" in err


def test_make_service_with_engine_override(tmp_path: Path) -> None:
    """--engine overrides the configured engine name."""
    options = Options()
    options.parseOptions(["--engine", "echo", "--config", write(tmp_path / "a.toml", "")])
    service = makeService(options)
    assert isinstance(service, AgentService)
    assert service.runtime.engine.name == "echo"
    assert service.listen == "stdio"


def test_post_options_fixes_twistd_defaults() -> None:
    """Left at their defaults, twistd's pidfile is disabled and the log goes to stderr."""
    parent = {"pidfile": "twistd.pid", "logger": None, "logfile": None}
    options = Options()
    options.parent = parent  # type: ignore[assignment]
    options.parseOptions([])
    assert parent["pidfile"] == ""
    assert parent["logger"] == "acpkit_agent.tap.stderr_observer"


def test_post_options_keeps_user_choices() -> None:
    """A user's own --pidfile and --logfile are kept."""
    parent = {"pidfile": "/run/a.pid", "logger": None, "logfile": "/tmp/x.log"}
    options = Options()
    options.parent = parent  # type: ignore[assignment]
    options.parseOptions([])
    assert parent == {"pidfile": "/run/a.pid", "logger": None, "logfile": "/tmp/x.log"}


def test_version_option_prints_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the agent's version and exits 0."""
    from acpkit import __version__

    with pytest.raises(SystemExit) as caught:
        Options().parseOptions(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out == f"{__version__}\n"


def test_help_documents_every_option() -> None:
    """The options' help names --config, --listen, --engine and --version."""
    text = str(Options())
    for option in ("--config", "--listen", "--engine", "--version"):
        assert option in text


def test_unknown_option_is_a_usage_error() -> None:
    """An unknown option is refused."""
    with pytest.raises(usage.UsageError):
        Options().parseOptions(["--colour"])


def test_stderr_observer_writes_plain_lines(capfd: pytest.CaptureFixture[str]) -> None:
    """The plugin's observer writes the formatted message, one line, to stderr."""
    observer = stderr_observer()
    observer({"log_format": "[acp] hello {who}", "who": "bob", "log_time": 0.0})
    out, err = capfd.readouterr()
    assert out == ""
    assert "[acp] hello bob\n" in err


def test_banner_names_engine_version_and_config() -> None:
    """
    The banner: name, version, title (and, with yolo, that commands run without asking and
    how to be asked), engine description, config file or none.
    """
    lines = banner_lines(AgentConfig(), "echo (offline)", "0.1.0")
    assert lines[0] == (
        "bob 0.1.0 — Bob (bash-first agent) — yolo: runs commands and changes files WITHOUT "
        "ASKING (put yolo = false in <project>/.acpkit/agent.toml to be asked first)"
    )
    assert "  engine:      echo (offline)" in lines
    assert "  config:      none" in lines
    lines = banner_lines(AgentConfig(path="/p/a.toml", yolo=False, context_window=10), "x", "1")
    assert "  config:      /p/a.toml" in lines
    assert "  permissions: asks before changes" in lines
    assert lines[0] == "bob 1 — Bob (bash-first agent)"
