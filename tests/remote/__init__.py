"""Tests of remote ACP: server, clients, TLS, tokens, attacks, the load balancer (acpkit/remote)."""
