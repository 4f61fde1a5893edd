"""Model implementations, looked up by config.json's architecture (see registry.py)."""
