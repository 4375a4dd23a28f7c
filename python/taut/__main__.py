"""Command line: ``python -m taut bench`` (and further subcommands)."""

from __future__ import annotations

import sys

from taut.cli import main

if __name__ == "__main__":
    sys.exit(main())
