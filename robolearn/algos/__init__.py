"""algos (populated by later issues)."""
