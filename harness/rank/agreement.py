"""The call-agreement protocol: every rank of a TP group checks that all of them make the same call.

The golden loops exchange data but no protocol metadata (the kernels'
launch tags and generations), so on the golden path the rank checks, before
every launch, that every rank makes the same launch with the same
parameters and input shapes; a disagreement (a skipped or repeated launch, a
rank with other rows or parameters) is then named instead of silently
pairing unrelated exchanges. On the kernel path the check runs after each
completed launch: a disagreement that hangs the kernels must stay
reproducible (the watchdog names it), and one the kernels' protocol does not
exchange (e.g. a call param such as ``query_per_row``) completes with wrong bits
instead of hanging, and is named here.

Protocol: each rank describes its call (launch index, call, parameters,
each input's shape and dtype) as JSON in ``AGREEMENT_BYTES`` bytes
(``contracts.wire_header``: a description that does not fit raises
``HeaderTooLong``, never truncated) and all-gathers it over the group's
comm; every rank compares all descriptions and, on any difference, raises ``CallDisagreement`` at the same exchange, so the ranks stay in step.
"""

from __future__ import annotations

from typing import Any

from contracts.wire_header import decode_header, encode_header

AGREEMENT_BYTES = 1024


class CallDisagreement(RuntimeError):
    """Ranks are not making the same call (raised on every rank at the same exchange, so they stay in step)."""


def deviations(launch: Any) -> dict:
    """``{param: [this rank's, the call's]}`` (and ``{"<input>.shape": [...]}``) where this rank's launch differs."""
    mine, agreed = launch.call_params, launch.agreed_params
    found = {k: [mine.get(k), agreed.get(k)] for k in sorted(set(mine) | set(agreed)) if mine.get(k) != agreed.get(k)}
    for name in sorted(set(launch.call_inputs) & set(launch.agreed_inputs)):
        shapes = [list(getattr(t, "shape", ())) for t in (launch.call_inputs[name], launch.agreed_inputs[name])]
        if shapes[0] != shapes[1]:
            found[f"{name}.shape"] = shapes  # e.g. a rank that reduces other rows than its peers
    return found


def call_description(launch: Any) -> dict:
    """What this rank is about to launch: index, call, params, and each input's shape and dtype."""
    shapes = {k: [list(v.shape), str(v.dtype).replace("torch.", "")] for k, v in sorted(launch.call_inputs.items())
              if hasattr(v, "shape")}
    return {"launch": launch.index, "call": launch.call, "params": {k: repr(v) for k, v in
                                                                   sorted(launch.call_params.items())},
            "inputs": shapes}


def _gather_descriptions(comm: Any, mine: dict) -> list[dict]:
    """Every rank's call description, in rank order (one all_gather of a fixed-size byte buffer)."""
    buf = encode_header(mine, AGREEMENT_BYTES, f"the call description of launch {mine.get('launch')}")
    return [decode_header(row) for row in comm.all_gather(buf).cpu()]


def check_agreement(comm: Any, launch: Any) -> None:
    """Raise ``CallDisagreement`` naming every rank's call when the ranks of ``comm`` are not making the same call."""
    views = _gather_descriptions(comm, call_description(launch))
    if all(v == views[0] for v in views):
        return
    keys = sorted({k for v in views for k in v} - {"inputs"}) + ["inputs"]
    differing = [k for k in keys if any(v.get(k) != views[0].get(k) for v in views)]
    parts = [f"rank {r}: " + ", ".join(f"{k} {v.get(k)}" for k in differing) for r, v in enumerate(views)]
    raise CallDisagreement(f"ranks disagree on the call at rank {comm.rank}'s launch {launch.index}: " + "; ".join(parts))
