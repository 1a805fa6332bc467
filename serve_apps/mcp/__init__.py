"""MCP: the transport-independent server (server) and its Streamable HTTP endpoint on the ingress (http)."""
