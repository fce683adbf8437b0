"""Tests of typed connections, runners, asyncio handlers, SDK interop (acpkit/connection)."""
