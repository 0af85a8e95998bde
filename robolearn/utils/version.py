"""The package version, in one place every layer may import (``robolearn.utils``)."""

VERSION = "0.1.0"
"""robolearn's version; ``pyproject.toml`` carries the same string and a test keeps them equal."""
