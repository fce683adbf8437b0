"""Tests of the JSON-RPC engine, classify, dispatch, cancel, deep JSON (acpkit/jsonrpc)."""
