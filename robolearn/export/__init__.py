"""export (populated by later issues)."""
