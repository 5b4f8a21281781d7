"""What seed 001's fused Markov kernels and their golden stand-in share: the constructor and the step's ``base``.

``constructor`` is ``MarkovKernels``'s signature (``contracts.constructor``).

``MarkovKernels.step`` (``kernels.markov_fused.host``) and its golden stand-in
(``golden.markov_fused.public``) take ``base``, this step's BF16 logits, in
either of two forms, and ``vocab_offset``, the global vocab id of the
rank's first entry (as in the seed: the ids the Gumbel noise and the argmax
number, ``rank * width`` under a vocab shard):

- the whole vocabulary, ``[rows, V]`` (``base[:, col]`` of ``[rows, steps,
  V]``): the step reads columns ``[vocab_offset, vocab_offset + width)``;
- the seed's view from the rank's first entry, ``[rows, n]`` with ``width
  <= n < V`` (``base[:, col, off:off + width]``, or ``base[:, col, off:]``):
  column 0 is vocab id ``vocab_offset``, and the step reads columns ``[0,
  width)``, as the seed's kernel does.

The two never meet: a view whose column 0 is id ``vocab_offset > 0`` holds
at most ``V - vocab_offset`` ids, so ``V`` columns always mean the whole
vocabulary; at ``vocab_offset = 0`` both read the same columns. Torch and
the standard library only (``contracts/``'s rule); no tensor is read.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from contracts.deadlines import SERVING_DEADLINE_NS


def constructor(
    w1: torch.Tensor,
    embeds: torch.Tensor,
    *,
    width: int,
    has_cap: bool,
    tp: int | None,
    steps: Iterable[tuple[int, bool, bool]],
    pick_pdl: bool,
    fill_vector: bool | Iterable[bool],
    group: Any = None,
    max_rows: int | None = None,
    max_steps: int | None = None,
    timeout_ns: int = SERVING_DEADLINE_NS,
    diag: Any = None,
    rank: int | None = None,
    flight_recorder: bool = True,
    flight_dir: Any = None,
) -> dict[str, Any]:
    """The public constructor's arguments by name, ``steps`` as a list and ``fill_vector`` a bool or a tuple
    (``MarkovKernels`` and its golden stand-in take this signature, ``contracts.constructor.takes``)."""
    arguments = dict(locals())
    # Iterables are read once here, so a generator given as either is still whole where it is used.
    arguments["steps"] = list(steps)
    arguments["fill_vector"] = fill_vector if isinstance(fill_vector, bool) else tuple(fill_vector)
    return arguments


def step_base_start(columns: int, vocab: int, width: int, vocab_offset: int) -> int:
    """The first column of ``base`` (``columns`` wide) a step over ``width`` ids from ``vocab_offset`` reads, or a
    ValueError (TypeError for a non-int offset) naming ``vocab_offset`` or ``base`` (module docstring)."""
    if isinstance(vocab_offset, bool) or not isinstance(vocab_offset, int):
        raise TypeError(f"vocab_offset: expected an int, got {type(vocab_offset).__name__}")
    if not 0 <= vocab_offset <= vocab - width:
        raise ValueError(f"vocab_offset: expected columns [{vocab_offset}, {vocab_offset + width}) inside [0, {vocab})")
    if columns == vocab:
        return vocab_offset
    if width <= columns < vocab:
        return 0
    raise ValueError(
        f"base: expected this step's logits over the whole vocabulary, [rows, {vocab}] (e.g. base[:, col]; read "
        f"from column vocab_offset), or the seed's view from the rank's first id, [rows, n] with {width} <= n < "
        f"{vocab} (e.g. base[:, col, vocab_offset:vocab_offset + {width}]; column 0 is vocab id vocab_offset), "
        f"got {columns} columns")


__all__ = ["step_base_start"]
