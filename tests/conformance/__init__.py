"""Tests of the conformance tester (acpkit/conformance)."""
