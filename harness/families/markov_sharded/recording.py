"""The sharded sampler's public class as a recording sees it (``harness.recording.targets`` gathers it).

``ShardedMarkovSampler.__call__``: the request state (input ids, index
mapping, temperature) is replicated, the same bits on every rank; the base
logits, noise and cache are the rank's own.
"""

from __future__ import annotations

from harness.recording.public_class import MethodFacts, PublicClass

PUBLIC_CLASSES = (
    PublicClass("ShardedMarkovSampler", "kernels.markov_sharded.host", {
        "__call__": MethodFacts(agreed=("input_ids", "idx_mapping", "temperature")),
    }),
)
