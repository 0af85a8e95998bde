"""cli (populated by later issues)."""
