"""``python -m stateway``: the same as the ``stateway`` command."""

import sys

from stateway.cli import main

sys.exit(main())
