"""``python -m harness``: the rankcheck command line (see harness.cli).

The interrupt handlers go in first, before anything can start a process:
SIGINT and SIGTERM alike end every process tree this harness started, once,
whatever signals follow (``harness.launch.supervision.install_interrupt_handlers``).
"""

import sys

from harness.launch.supervision import install_interrupt_handlers

install_interrupt_handlers()

from harness.cli import main  # noqa: E402 - after the handlers, so no start-up moment is unprotected

sys.exit(main())
