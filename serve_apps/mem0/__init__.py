"""The Mem0-compatible REST API: its router (api), the mapping onto memcluster entries (map), its models."""
