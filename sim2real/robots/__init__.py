"""robots (populated by later issues)."""
