"""Tests of tracing and replay (acpkit/trace)."""
