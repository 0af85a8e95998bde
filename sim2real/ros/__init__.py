"""ros (populated by later issues)."""
