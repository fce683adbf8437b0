"""
``acpkit-conformance --url`` through HAProxy (the documented configuration, three bobs)
gives what it gives against one bob reached directly: the same status for every rule,
over Streamable HTTP and over WebSocket, with the bearer token as a ``--header``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import attrs
import pytest

from acpkit.conformance.cli import main
from tests.balancer import all_healthy, start_bob_behind, start_haproxy, write_token
from tests.listening_bob import ListeningBob, start_bob

pytestmark = pytest.mark.process


@attrs.frozen
class Targets:
    """The balancer's URL, a bob reached directly, and the token both take."""

    balanced: str
    direct: str
    token: str


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Targets]:
    tmp = tmp_path_factory.mktemp("balanced")
    token = write_token(tmp / "token")
    started: list[ListeningBob] = []
    balancer = None
    try:
        for n in (1, 2, 3):
            started.append(start_bob_behind(tmp, f"bob{n}", tmp / "token"))
        balancer = start_haproxy(tmp, [f"127.0.0.1:{bob.port}" for bob in started])
        all_healthy(balancer)
        direct_home = tmp / "direct"
        direct_home.mkdir()
        direct = start_bob(
            direct_home,
            "--listen",
            "http:tcp:0",
            "--token-file",
            str(tmp / "token"),
            config="[sessions]\nenabled = true\n",
        )
        started.append(direct)
        yield Targets(balancer.url, direct.url, token)
    finally:
        if balancer is not None:
            balancer.stop()
        for bob in started:
            bob.stop()


def statuses(url: str, token: str) -> tuple[int, dict[str, str], list[str]]:
    """
    ``acpkit-conformance --url URL --header Authorization:…``: the exit status, each
    rule's status, and the MUST rules broken.
    """
    out = io.StringIO()
    status = main(
        [
            "--url",
            url,
            "--header",
            f"Authorization:Bearer {token}",
            "--report",
            "json",
            "--timeout",
            "15",
        ],
        out=out,
    )
    document = json.loads(out.getvalue())
    assert document["error"] is None, document["error"]
    broken = [
        f"{rule['id']}: {rule['findings'][0]['message'] if rule['findings'] else ''}"
        for rule in document["rules"]
        if rule["status"] == "fail" and rule["level"] == "MUST"
    ]
    return status, {rule["id"]: rule["status"] for rule in document["rules"]}, broken


@pytest.mark.parametrize("scheme", ["http", "ws"])
def test_conformance_through_haproxy_is_as_direct(targets: Targets, scheme: str) -> None:
    """
    Through HAProxy the tester passes exactly as against one bob directly: no MUST
    rule broken, the same exit status (bob breaks a SHOULD rule, MCP over HTTP, either
    way) and the same status rule by rule.
    """
    balanced = statuses(targets.balanced.replace("http://", f"{scheme}://"), targets.token)
    direct = statuses(targets.direct.replace("http://", f"{scheme}://"), targets.token)
    assert balanced[2] == direct[2] == []
    assert balanced[0] == direct[0]
    differing = {
        rule: (balanced[1].get(rule), status)
        for rule, status in direct[1].items()
        if balanced[1].get(rule) != status
    }
    assert differing == {}
    assert sum(status == "pass" for status in balanced[1].values()) > 30
