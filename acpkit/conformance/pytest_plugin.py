"""
pytest plugin: ``pytest --acp-agent "CMD …"`` (an agent the suite starts) or ``pytest
--acp-url URL`` (a remote agent, like ``acpkit-conformance --url``) collects one test item
per conformance rule.

The suite runs once (on the first item) and each item then passes, fails with its findings
(and the spec sentence it breaks), or is skipped when the rule is not applicable, could not be
judged in time (``slow``) or is deselected. Options: ``--acp-agent`` or ``--acp-url`` (with
``--acp-header NAME:VALUE``, repeatable, sent on every request and never reported, and for
an ``https://`` or ``wss://`` URL ``--acp-tls-trust-root FILE``, ``--acp-tls-certificate
FILE`` and ``--acp-tls-private-key FILE``, as ``acpkit-conformance``'s ``--tls-*``),
``--acp-profile`` (smoke / quick / full), ``--acp-seed``, ``--acp-timeout``,
``--acp-model-server``, ``--acp-rules`` and ``--acp-skip`` (rule ids or prefixes, comma
separated, repeatable), ``--acp-strict`` (SHOULD findings fail their item; without it they
pass with a `ConformanceWarning`) and ``--acp-expected-failures FILE`` (a baseline of
accepted findings: their items are xfail, and a listed rule that holds fails its item as a
stale entry), ``--acp-scenarios FILE`` (the prompts that make the agent do each behaviour,
`acpkit.conformance.scenarios`) and ``--acp-discovery auto|on|off`` (try the agent's
commands). Registered as the ``pytest11`` entry point ``acpkit_conformance``.

The plugin is loaded by every pytest run of a project that installed acpkit, so it is inert
and costs nothing unless ``--acp-agent`` or ``--acp-url`` is given: this module imports
nothing at import time (not even pytest), adds its options, and leaves the collected items
alone. Only with one of them does it import the items (`acpkit.conformance.pytest_items`), the rule
catalogue and, when the first item runs, the tester (Hypothesis, jsonschema).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

from acpkit.conformance.pytest_options import headers_of, tls_of

if TYPE_CHECKING:
    import pytest

    from acpkit.conformance.pytest_items import ConformanceItem, ConformanceWarning

__all__ = [
    "ConformanceItem",
    "ConformanceWarning",
    "headers_of",
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_terminal_summary",
    "tls_of",
]


#: The modules of the ``conformance`` extra the items need (setup.cfg keeps them).
_CONFORMANCE_MODULES = ("hypothesis", "jsonschema")


def _importable(module: str) -> bool:
    """Whether a top-level ``module`` can be found (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a finder that refuses it
        return False


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the ``--acp-*`` options."""
    group = parser.getgroup("acpkit-conformance")
    group.addoption("--acp-agent", default=None, help="agent command to test (shell words)")
    group.addoption(
        "--acp-url",
        default=None,
        help="test the remote agent at this ws://, wss://, http:// or https:// URL instead",
    )
    group.addoption(
        "--acp-header",
        action="append",
        default=[],
        help="NAME:VALUE sent on every request to --acp-url (repeatable; never reported)",
    )
    group.addoption(
        "--acp-tls-trust-root",
        default=None,
        metavar="FILE",
        help="PEM file of the CAs trusted for an https:// or wss:// --acp-url",
    )
    group.addoption(
        "--acp-tls-certificate",
        default=None,
        metavar="FILE",
        help="PEM client certificate presented to an https:// or wss:// --acp-url",
    )
    group.addoption(
        "--acp-tls-private-key",
        default=None,
        metavar="FILE",
        help="PEM private key of --acp-tls-certificate",
    )
    group.addoption("--acp-profile", default="quick", choices=("smoke", "quick", "full"))
    group.addoption("--acp-seed", type=int, default=0)
    group.addoption("--acp-timeout", type=float, default=10.0)
    group.addoption("--acp-model-server", action="store_true", default=False)
    group.addoption(
        "--acp-rules", action="append", default=[], help="only these rule ids or prefixes"
    )
    group.addoption("--acp-skip", action="append", default=[], help="skip these rule ids")
    group.addoption(
        "--acp-strict",
        action="store_true",
        default=False,
        help="SHOULD findings fail their item (without it they pass with a warning)",
    )
    group.addoption(
        "--acp-expected-failures",
        default=None,
        metavar="FILE",
        help="TOML baseline of accepted findings: their items xfail; a stale entry fails",
    )
    group.addoption(
        "--acp-scenarios",
        default=None,
        metavar="FILE",
        help="TOML file of prompts that make the agent do each behaviour the rules need",
    )
    group.addoption(
        "--acp-discovery",
        default="auto",
        choices=("auto", "on", "off"),
        help="try the agent's advertised commands to learn stimuli (auto: unless a model "
        "server drives the turns)",
    )


def _wanted(config: pytest.Config) -> bool:
    """Whether an agent is to be tested (``--acp-agent`` or ``--acp-url``)."""
    return bool(config.getoption("--acp-agent") or config.getoption("--acp-url"))


def pytest_configure(config: pytest.Config) -> None:
    """With ``--acp-agent`` or ``--acp-url``, refuse at once (a usage error) when the extra
    is missing, when both are given, when the URL or a header is malformed, or when a
    ``--acp-tls-*`` option names a file that cannot be used or goes with a cleartext URL."""
    if not _wanted(config):
        return
    import pytest

    url = config.getoption("--acp-url")
    option = "--acp-url" if url else "--acp-agent"
    if url and config.getoption("--acp-agent"):
        raise pytest.UsageError("give either --acp-agent or --acp-url, not both")
    missing = [name for name in _CONFORMANCE_MODULES if not _importable(name)]
    if missing:
        raise pytest.UsageError(
            f"{option} needs the 'conformance' extra ({', '.join(missing)} missing): "
            "python -m pip install 'txacpkit[conformance]'"
        )
    try:
        headers_of(config.getoption("--acp-header"))
        if url:
            from acpkit.conformance.wire import RemoteURL

            RemoteURL.parse(url)
    except ValueError as e:
        raise pytest.UsageError(f"{option}: {e}") from None
    secure = bool(url) and url.split(":", 1)[0].lower() in ("https", "wss")
    problem = tls_of(config).usage_problem(secure, prefix="--acp-tls-")
    if problem is not None:
        raise pytest.UsageError(problem)
    baseline = config.getoption("--acp-expected-failures")
    if baseline:
        from acpkit.conformance.baseline import BaselineError, load_baseline

        try:
            load_baseline(baseline)
        except BaselineError as e:
            raise pytest.UsageError(f"--acp-expected-failures: {e}") from None
    scenarios = config.getoption("--acp-scenarios")
    if scenarios:
        from acpkit.conformance.scenarios import ScenarioError, load_scenarios

        try:
            load_scenarios(scenarios)
        except ScenarioError as e:
            raise pytest.UsageError(f"--acp-scenarios: {e}") from None


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Add one item per rule when ``--acp-agent`` or ``--acp-url`` is given; otherwise do
    nothing."""
    if not _wanted(config):
        return
    from acpkit.conformance.pytest_items import conformance_items

    items.extend(conformance_items(session))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """After a run that tested an agent: the coverage (how many rules were judged, what was
    not exercised and what would exercise it), as the text report's first lines say it."""
    if not _wanted(config):
        return
    from acpkit.conformance.pytest_items import suite_result

    result = suite_result(config)
    if result is None or result.error is not None:
        return
    terminalreporter.section("acp conformance coverage")
    for line in result.coverage.lines():
        terminalreporter.write_line(line)


def __getattr__(name: str) -> Any:
    # ConformanceItem and ConformanceWarning stay importable from here, loaded on first use.
    if name in ("ConformanceItem", "ConformanceWarning"):
        return getattr(importlib.import_module("acpkit.conformance.pytest_items"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
