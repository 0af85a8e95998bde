"""configs (populated by later issues)."""
