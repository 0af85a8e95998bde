"""runners (populated by later issues)."""
