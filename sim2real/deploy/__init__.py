"""deploy (populated by later issues)."""
