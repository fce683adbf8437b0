"""The reference ACP agent "bob", built on acpkit's public API."""
