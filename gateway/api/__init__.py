"""The gateway's API edges: wire protocols translated to and from the core types."""
