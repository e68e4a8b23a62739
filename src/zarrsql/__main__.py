"""`python -m zarrsql`: the same command line as the installed `zarrsql` script."""

from __future__ import annotations

import sys

from zarrsql.cli import main

if __name__ == "__main__":
    sys.exit(main())
