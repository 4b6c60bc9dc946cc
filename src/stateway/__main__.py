import sys

from stateway.cli import main

sys.exit(main())
