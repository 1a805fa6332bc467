"""Examples of agents that use memcluster through memclient."""
