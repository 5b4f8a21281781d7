"""rankcheck: the user-facing names of the harness (the implementation lives in ``harness/``).

``rankcheck.recording(system, directory, family=..., config=..., static=...)``
records every rank of your own torchrun job (``harness.recording.writer``): one
bundle per rank plus a world manifest, bounded, written on exit, on an
exception and on SIGTERM/SIGINT; ``python -m harness replay --bundle DIR``
replays it offline.
"""

from harness.recording.writer import recording

__all__ = ["recording"]
