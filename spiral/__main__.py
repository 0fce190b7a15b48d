"""`python -m spiral ...`, the same as the `spiral` command."""

import sys

from spiral.cli import main

if __name__ == "__main__":
    sys.exit(main())
