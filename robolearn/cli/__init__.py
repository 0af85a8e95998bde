"""Command-line entry points: the ``robolearn`` console script (:mod:`robolearn.cli.main`).

The CLI sits at the top of the import table (DESIGN.md): it may import every module, and it is the
only place where Hydra and OmegaConf are imported.
"""
