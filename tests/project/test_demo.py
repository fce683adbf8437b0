"""The README's first command: ``python -m acpkit.demo``."""

import io
import json

from acpkit import demo


def test_demo_plays_one_turn_and_prints_the_wire() -> None:
    """The demo prints every client-side line as valid JSON and ends with end_turn."""
    out = io.StringIO()
    assert demo.main(out) == 0
    lines = out.getvalue().splitlines()
    frames = [line[3:] for line in lines if line.startswith(("-> ", "<- "))]
    assert all(json.loads(frame)["jsonrpc"] == "2.0" for frame in frames)
    assert "stop reason: end_turn" in lines[-1]
    assert "agent said: Hello from acpkit, one JSON message per line." in out.getvalue()
