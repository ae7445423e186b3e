"""``python -m embedstream``: the same as the ``embedstream`` command."""

import sys

from embedstream.cli import main

if __name__ == "__main__":
    sys.exit(main())
