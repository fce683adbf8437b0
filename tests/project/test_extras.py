"""
Dependencies by use: each public module group imports with only its extra installed.

A venv per extra would be slow and need the network; instead each group is imported in a
subprocess whose ``sys.meta_path`` starts with a finder that refuses every top-level
module that is neither the standard library, acpkit's own packages, nor provided by a
distribution in the closure of the group's requirements as ``setup.cfg`` declares them
(``install_requires`` plus the group's extras, followed through each installed
distribution's own requirements). A refused import raises ``ModuleNotFoundError``, as a
missing package would. So a new import of an undeclared package in, say, the core fails
here, whatever the package is.
"""

from __future__ import annotations

import configparser
import functools
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Collection, Mapping
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from acpkit_client import launch
from tests.project.test_docs_examples import plugin_option

ROOT = Path(__file__).parent.parent.parent
OURS = ("acpkit", "acpkit_agent", "acpkit_client", "twisted")


def _setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def _lines(value: str) -> list[str]:
    return [
        line.strip()
        for line in value.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def requirements(extras: tuple[str, ...]) -> list[Requirement]:
    """``install_requires`` plus the requirements of ``extras``, as ``setup.cfg`` says."""
    config = _setup_cfg()
    found = [Requirement(line) for line in _lines(config["options"]["install_requires"])]
    for extra in extras:
        found += [Requirement(line) for line in _lines(config["options.extras_require"][extra])]
    return found


def extra_names() -> list[str]:
    return list(_setup_cfg()["options.extras_require"])


def closure(requirements: list[Requirement]) -> set[str]:
    """The canonical names of the installed distributions these requirements pull in."""
    seen: set[str] = set()
    todo = [(req, frozenset(req.extras)) for req in requirements]
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        key = f"{name}[{','.join(sorted(extras))}]"
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional dependency that is not installed here
        for line in dist.requires or []:
            sub = Requirement(line)
            environments = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in environments):
                todo.append((sub, frozenset(sub.extras)))
    return {key.split("[", 1)[0] for key in seen}


@functools.cache
def _packages_distributions() -> Mapping[str, list[str]]:
    """``importlib.metadata.packages_distributions()``, read once: it reads every
    installed distribution's file list (seconds), and the environment does not change."""
    return metadata.packages_distributions()


def top_level_modules(distributions: Collection[str]) -> set[str]:
    """The importable top-level names those distributions install."""
    modules = set()
    for module, owners in _packages_distributions().items():
        if any(canonicalize_name(owner) in distributions for owner in owners):
            modules.add(module)
    return modules


def module_names(package: str) -> list[str]:
    """Every module of one of our packages, from its files (nothing is imported)."""
    names = []
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__main__":
            continue  # running it is the command, not importing the package
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


TESTING = {"acpkit.testing.strategies", "acpkit.testing.jsonschema"}
PYTEST_ONLY = {"acpkit.conformance.pytest_plugin"}  # loaded by pytest in every project
PYTEST_ITEMS = {"acpkit.conformance.pytest_items"}  # loaded by the plugin on --acp-agent
REMOTE = {"acpkit.remote.websocket", "acpkit.remote.http_client"}  # the remote extra


def _is_conformance(name: str) -> bool:
    return name.startswith("acpkit.conformance")


CORE = [
    name
    for name in module_names("acpkit")
    if not _is_conformance(name) and name not in TESTING | REMOTE
]
CONFORMANCE = [
    name
    for name in module_names("acpkit")
    if _is_conformance(name) and name not in PYTEST_ONLY | PYTEST_ITEMS
]

#: (group, the extras it may use, further distributions it may use, its modules)
GROUPS = [
    ("core", (), (), CORE),
    ("testing", ("testing",), (), sorted(TESTING)),
    ("remote", ("remote",), (), sorted(REMOTE)),
    ("websocket", ("websocket",), (), ["acpkit.remote.websocket"]),
    ("conformance", ("conformance",), (), CONFORMANCE),
    ("pytest plugin", (), ("pytest",), sorted(PYTEST_ONLY)),
    ("pytest items", ("conformance",), ("pytest",), sorted(PYTEST_ITEMS)),
    ("agent", ("agent",), (), [*module_names("acpkit_agent"), "twisted.plugins.acpkit_agent"]),
    ("client", ("client",), (), module_names("acpkit_client")),
]

_IMPORTER = textwrap.dedent(
    """
    import importlib, json, sys, traceback

    allowed = set(json.loads(sys.argv[1])) | set(sys.stdlib_module_names)
    allowed |= {name.split(".")[0] for name in sys.modules}  # already loaded at startup
    refused = set()

    class Refuse:
        def find_spec(self, fullname, path=None, target=None):
            top = fullname.split(".")[0]
            if top in allowed or top.startswith("_sysconfigdata"):  # stdlib, per platform
                return None
            refused.add(top)
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)

    sys.meta_path.insert(0, Refuse())
    failures = {}
    for module in json.loads(sys.argv[2]):
        try:
            importlib.import_module(module)
        except Exception:
            failures[module] = traceback.format_exc(limit=-3).strip().splitlines()[-1]
    print(json.dumps({"failures": failures, "refused": sorted(refused)}))
    """
)


def import_with_only(modules: list[str], allowed: set[str]) -> dict[str, object]:
    """Import ``modules`` in a subprocess that can import only ``allowed`` top-level names."""
    env = dict(os.environ)
    env.pop("PYTHONSTARTUP", None)
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTER, json.dumps(sorted(allowed)), json.dumps(modules)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.process
@pytest.mark.parametrize(
    ("extras", "others", "modules"),
    [pytest.param(extras, others, modules, id=group) for group, extras, others, modules in GROUPS],
)
def test_group_imports_with_only_its_extra(
    extras: tuple[str, ...], others: tuple[str, ...], modules: list[str]
) -> None:
    """
    Every module of the group imports when only the core's requirements, the group's
    extras and (for the pytest plugin) pytest are importable.
    """
    distributions = closure(requirements(extras) + [Requirement(name) for name in others])
    allowed = top_level_modules(distributions) | set(OURS)
    result = import_with_only(modules, allowed)
    assert result["failures"] == {}, result


@pytest.mark.process
def test_the_blocker_refuses_what_the_core_does_not_declare() -> None:
    """The check has teeth: the TUI, needing urwid, does not import with the core alone."""
    allowed = top_level_modules(closure(requirements(()))) | set(OURS)
    assert "urwid" not in allowed and "hypothesis" not in allowed
    result = import_with_only(["acpkit_client.tui.app", "acpkit.testing.strategies"], allowed)
    failures = result["failures"]
    assert isinstance(failures, dict)
    assert set(failures) == {"acpkit_client.tui.app", "acpkit.testing.strategies"}
    assert "urwid" in str(result["refused"]) and "hypothesis" in str(result["refused"])


def test_all_holds_every_user_extra_and_test_holds_all() -> None:
    """``all`` is everything a user runs; ``test`` is ``all`` plus the test tools."""
    config = _setup_cfg()["options.extras_require"]
    named = {name: {str(Requirement(line)) for line in _lines(config[name])} for name in config}
    user_extras = ("agent", "client", "conformance", "testing", "remote", "websocket")
    for extra in user_extras:
        assert named[extra] <= named["all"], extra
    assert set().union(*(named[extra] for extra in user_extras)) == named["all"]
    assert named["all"] <= named["test"]


def test_the_launcher_knows_each_extra_by_its_modules() -> None:
    """
    The modules the console scripts look for before starting are exactly the top-level
    modules of the direct requirements of the extra they name in their message.
    """
    for extra, modules in launch.EXTRA_MODULES.items():
        declared = {canonicalize_name(req.name) for req in requirements((extra,))}
        declared -= {canonicalize_name(req.name) for req in requirements(())}
        assert set(modules) <= top_level_modules(declared), extra
        for distribution in declared:
            assert set(modules) & top_level_modules({distribution}), (extra, distribution)
    assert set(launch.EXTRA_MODULES) <= set(extra_names())


_REFUSE = textwrap.dedent(
    """
    import sys

    blocked = set(sys.argv.pop(1).split(","))

    class Refuse:
        def find_spec(self, fullname, path=None, target=None):
            if fullname.split(".")[0] in blocked:
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
            return None

    sys.meta_path.insert(0, Refuse())
    """
)

# After _REFUSE has taken the blocked names, argv[1] is the command to launch (--help).
_LAUNCH = _REFUSE + textwrap.dedent(
    """
    from acpkit_client import launch

    sys.argv = [sys.argv[1], "--help"]
    command = {"acpkit-client": launch.acpkit_client}
    command["acpkit-conformance"] = launch.acpkit_conformance
    sys.exit(command[sys.argv[0]]())
    """
)


@pytest.mark.process
@pytest.mark.parametrize(
    ("command", "blocked", "extra"),
    [
        ("acpkit-client", "urwid,pygments,pathspec", "client"),
        ("acpkit-client", "pathspec", "client"),
        ("acpkit-conformance", "hypothesis,jsonschema", "conformance"),
    ],
)
def test_a_command_without_its_extra_says_which_to_install(
    command: str, blocked: str, extra: str
) -> None:
    """
    A console script whose extra is not installed prints one line naming the extra and
    its install command, and exits 2, instead of a traceback from deep in an import.
    """
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCH, blocked, command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == launch.MISSING_EXTRA_EXIT_STATUS, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"{command} needs the '{extra}' extra (")
    assert f"pip install 'txacpkit[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.process
def test_a_command_with_its_extra_starts() -> None:
    """With its extra installed, the launcher runs the command (here its --help)."""
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCH, "nothing", "acpkit-client"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout.lower()


@pytest.mark.process
def test_bob_without_the_agent_extra_says_which_to_install() -> None:
    """``twistd -n acp-agent`` without treq and PyYAML: one line naming the extra, exit 2."""
    program = _REFUSE + textwrap.dedent(
        """
        from twisted.scripts.twistd import run

        sys.argv = ["twistd", "-n", "acp-agent"]
        run()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program, "treq,yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == launch.MISSING_EXTRA_EXIT_STATUS, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith("acp-agent needs the 'agent' extra ("), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert "pip install 'txacpkit[agent]'" in done.stderr


@pytest.mark.process
def test_the_pytest_plugin_without_the_conformance_extra_says_which_to_install(
    tmp_path: Path,
) -> None:
    """
    ``pytest --acp-agent`` without Hypothesis and jsonschema is a usage error naming the
    extra, not a traceback; without ``--acp-agent`` the plugin needs neither.
    """
    program = _REFUSE + textwrap.dedent(
        """
        import pytest

        sys.exit(pytest.main(sys.argv[1:]))
        """
    )
    # Hypothesis's own pytest plugin is installed here; without Hypothesis it is not.
    plugin = [*plugin_option(), "-p", "no:cacheprovider", "-p", "no:hypothesispytest"]
    args = [*plugin, "-q", "--rootdir", str(tmp_path), str(tmp_path)]
    (tmp_path / "test_nothing.py").write_text("def test_x():\n    pass\n", encoding="utf-8")
    runs = []
    for extra in ([], ["--acp-agent", "no-such-agent"]):
        runs.append(
            subprocess.run(
                [sys.executable, "-c", program, "hypothesis,jsonschema", *args, *extra],
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        )
    plain, with_agent = runs
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert with_agent.returncode == pytest.ExitCode.USAGE_ERROR, with_agent.stdout
    output = with_agent.stdout + with_agent.stderr
    assert "ERROR: --acp-agent needs the 'conformance' extra (" in output
    assert "jsonschema" in output and "pip install 'txacpkit[conformance]'" in output
    assert "Traceback" not in output


_INTERRUPT_ON_IMPORT = textwrap.dedent(
    """
    import sys

    class Interrupt:
        def find_spec(self, fullname, path=None, target=None):
            if fullname == "acpkit_client.cli":
                raise KeyboardInterrupt  # a Ctrl-C while the command's modules import
            return None

    sys.meta_path.insert(0, Interrupt())
    from acpkit_client import launch

    sys.argv = ["acpkit-client", "ask", "hi"]
    sys.exit(launch.acpkit_client())
    """
)


@pytest.mark.process
def test_a_ctrl_c_while_importing_is_one_line_and_status_130() -> None:
    """Ctrl-C before the command handles signals: one line, exit 130, no traceback."""
    done = subprocess.run(
        [sys.executable, "-c", _INTERRUPT_ON_IMPORT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == launch.INTERRUPTED_EXIT_STATUS == 130, done.stderr
    assert done.stderr == "\nacpkit-client: interrupted\n"
    assert done.stdout == ""


def test_no_extra_but_websocket_and_remote_pulls_autobahn() -> None:
    """Autobahn (and its WAMP serializers) comes only with the extras that use WebSocket:
    ``websocket``, ``remote`` (both transports) and those holding everything."""
    pulling = {
        extra
        for extra in extra_names()
        if any(canonicalize_name(r.name) == "autobahn" for r in requirements((extra,)))
    }
    assert pulling == {"websocket", "remote", "all", "test"}


@pytest.mark.process
def test_websocket_without_its_extra_says_which_to_install() -> None:
    """Without Autobahn: importing the WebSocket module is one ImportError line naming the
    extra, and ``connect_remote`` to a ``ws://`` URL fails with it (no traceback from an
    import deep inside); the rest of acpkit.remote still imports."""
    program = _REFUSE + textwrap.dedent(
        """
        from twisted.internet import reactor

        from acpkit.connection import Client
        from acpkit.remote.connect import connect_remote

        try:
            import acpkit.remote.websocket
        except ImportError as e:
            print(str(e))
        failures = []
        connect_remote(reactor, "ws://127.0.0.1:9/acp", Client()).addErrback(failures.append)
        print(type(failures[0].value).__name__, failures[0].value)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program, "autobahn,txaio"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    line = (
        "WebSocket support needs the 'websocket' extra (Autobahn): "
        "python -m pip install 'txacpkit[websocket]'"
    )
    assert done.stdout == f"{line}\nImportError {line}\n"
