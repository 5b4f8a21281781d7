"""Rank 0's check of a golden-outcome case's reference outputs against the golden store (or their recording).

The golden store (``golden/store.py``, ``golden/<family>/golden_bits.json``) keeps
the digests of the reference outputs of every stored case
(``harness.wire.case_files.stored_case``). Rank 0 of such a case collects, for
every compared launch, the agreed inputs and the reference outputs, and
after its last launch checks them (``harness validate``) or records them
(``harness golden --regenerate``): the entry is ``family/name`` with variant
``world<tp>``, outputs flattened to ``launch<k>.<name>``, and the input
digest covers the static tensors and each compared launch's agreed inputs,
in launch order. The outcome is ``{"status", "message"}`` with status
``ok``, ``recorded``, ``missing``, ``input-changed`` or ``mismatch``; the
launcher turns it into the case's ``:stored-bits`` verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class StoreCollector:
    """The agreed inputs and reference outputs of a stored case's compared launches, in launch order."""

    def __init__(self, mode: str | None) -> None:
        self.mode = mode  # "check", "record", or None: this rank does not check the store
        self.agreed: list[dict] = []
        self.outputs: dict = {}

    def add(self, launch: Any, reference: dict) -> None:
        """Keep one compared launch's agreed inputs and reference outputs (nothing when not checking)."""
        if self.mode:
            self.agreed.append(launch.agreed_inputs)
            self.outputs.update({f"launch{launch.index}.{n}": t for n, t in reference.items()})

    def settle(self, case: Any, tp: int, static: dict) -> dict:
        """Check or record what was collected (``store_golden``)."""
        return store_golden(self.mode, case, tp, static, self.agreed, self.outputs)


def store_golden(mode: str, case: Any, tp: int, static: dict, agreed: list[dict], outputs: dict,
                 root: str | Path | None = None) -> dict:
    """Check (``mode`` check) or record (``record``) the reference outputs' digests in golden/store.py.

    ``root``: the store directory (default ``golden``: ``<family>/golden_bits.json``).
    """
    try:
        from golden import store  # noqa: PLC0415 - inside the try: a store that cannot import is reported missing
    except Exception as exc:  # noqa: BLE001
        return {"status": "missing", "message": f"golden.store not importable: {exc}"}
    digest = store.inputs_digest(static, *agreed)
    variant = f"world{tp}"
    golden_store = store.GoldenStore(root)
    try:
        if mode == "record":
            golden_store.record(case.key, digest, outputs, variant=variant, regenerate=True)
            return {"status": "recorded", "message": f"{len(outputs)} outputs recorded ({variant})"}
        golden_store.check(case.key, digest, outputs, variant=variant)
        return {"status": "ok", "message": f"{len(outputs)} outputs match the stored bits ({variant})"}
    except store.GoldenMissing as exc:
        return {"status": "missing", "message": str(exc)}
    except store.InputDigestMismatch as exc:
        return {"status": "input-changed", "message": str(exc)}
    except store.GoldenError as exc:
        return {"status": "mismatch", "message": str(exc)}
