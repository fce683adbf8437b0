"""The official ACP JSON schemas, vendored as package data."""
