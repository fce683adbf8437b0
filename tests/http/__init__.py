"""Tests of the HTTP clients, SSE (acpkit/http)."""
