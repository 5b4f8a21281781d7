"""Files written whole or not at all: a temporary file beside the target, then ``os.replace``."""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomically(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (a reader never sees it half written)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


__all__ = ["write_text_atomically"]
