"""Tests of stdio, endpoints, the bind policy, admission, compat (acpkit/io)."""
