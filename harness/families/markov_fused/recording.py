"""The fused loop's public class as a recording sees it (``harness.recording.targets`` gathers it).

``MarkovKernels``: per method, the replicated request state every rank
passes with the same bits (ids, index map, positions, seeds, temperature),
and ``step``'s ``vocab_offset``, the one plain argument that differs by
rank (its vocabulary shard).
"""

from __future__ import annotations

from harness.recording.public_class import MethodFacts, PublicClass

PUBLIC_CLASSES = (
    PublicClass("MarkovKernels", "kernels.markov_fused.host", {
        "anchor_embed": MethodFacts(agreed=("input_ids", "anchor_idx")),
        "step": MethodFacts(agreed=("idx_map", "pos", "seeds", "temperature"), per_rank=("vocab_offset",)),
        "gather_packets": MethodFacts(),
        "gather_draft": MethodFacts(),
        "pick": MethodFacts(),
        "cache_fill": MethodFacts(agreed=("idx_map",)),
    }),
)
