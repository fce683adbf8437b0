"""Tests of the framings (acpkit/framing)."""
