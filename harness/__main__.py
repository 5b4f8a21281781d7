"""``python -m harness``: the rankcheck command line (see harness.cli)."""

import sys

from harness.cli import main

sys.exit(main())
