"""
A client that records every ACP message it exchanges with the agent, then summarises
the trace.

    python tracing_client.py --trace acp.log "Hello" -- python minimal_agent.py

``--trace FILE`` attaches an explicit :class:`acpkit.trace.Tracer`; without it, the
``ACPKIT_TRACE`` environment variable is used (``spawn_agent`` attaches a tracer by
itself when it is set).  Either way, ``python -m acpkit.trace print FILE`` shows the file.
"""

import argparse
import json
import os
import sys

from acpkit import run_client, schema
from acpkit.connection import ClientConnection
from acpkit.trace import TRACE_VARIABLE, Tracer, open_trace_file, read_trace


def summary(message: bytes) -> str:
    """``request 0 initialize``, ``notification session/update``, ``response 0``..."""
    msg = json.loads(message)
    kind = ("request" if "id" in msg else "notification") if "method" in msg else "response"
    parts = [kind, json.dumps(msg["id"]) if "id" in msg else None, msg.get("method")]
    return " ".join(part for part in parts if part)


async def main(conn: ClientConnection, trace_path: str, prompt: str) -> None:
    await conn.initialize()
    session = await conn.new_session(schema.NewSessionRequest(cwd=os.getcwd(), mcp_servers=[]))
    await conn.prompt(
        schema.PromptRequest(
            session_id=session.session_id, prompt=[schema.TextContentBlock(text=prompt)]
        )
    )
    # Every message of the turn is in the file now (each line is written as it goes).
    for record in read_trace(trace_path):
        sys.stdout.write(f"{record.direction} {record.name} {summary(record.message)}\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().splitlines()[0])
    parser.add_argument("--trace", default=os.environ.get(TRACE_VARIABLE), help="the trace file")
    parser.add_argument("prompt")
    parser.add_argument("command", nargs="+", help="the agent's command, after --")
    args = parser.parse_args()
    if not args.trace:
        parser.error(f"give --trace FILE or set {TRACE_VARIABLE}")
    tracer = None  # ACPKIT_TRACE names the file: the agent's connection is traced anyway
    if args.trace != os.environ.get(TRACE_VARIABLE):
        trace_file = open_trace_file(args.trace)
        if trace_file is None:
            sys.exit(f"cannot write the trace file {args.trace}")
        tracer = Tracer("agent", trace_file)
    # The base Client (the default) ignores updates and rejects permission requests.
    run_client(
        lambda conn: main(conn, args.trace, args.prompt),
        args.command,
        tracer=tracer,
        name="agent",
    )
