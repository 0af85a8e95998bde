"""nn (populated by later issues)."""
