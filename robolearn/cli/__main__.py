"""``python -m robolearn.cli`` (and ``torchrun -m robolearn.cli``): the ``robolearn`` command."""

from robolearn.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
