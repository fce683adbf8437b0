"""The reference ACP client, built on acpkit's public API."""
