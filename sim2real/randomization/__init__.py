"""randomization (populated by later issues)."""
