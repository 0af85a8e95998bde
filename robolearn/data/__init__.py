"""data (populated by later issues)."""
