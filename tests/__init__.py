"""The memoryd test suite: run with pytest from the repository root."""
