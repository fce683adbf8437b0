"""Tests of the reference client and its terminal UI (acpkit_client)."""
