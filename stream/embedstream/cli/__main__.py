"""``python -m embedstream.cli``: the same as the ``embedstream`` command."""

import sys

from embedstream.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
