"""Tests of the MCP client (acpkit/mcp)."""
