"""logging (populated by later issues)."""
