"""The management API: LiteLLM's key, team and spend endpoints over the store."""
