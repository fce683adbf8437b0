"""Tests of bob, the reference agent (acpkit_agent)."""
