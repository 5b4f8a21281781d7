"""A test-only markov_sharded system with a planted bug, for the fuzzer's find-and-shrink test.

``ShardEdgeFault`` is the golden sharded system except that a call with at
least ``FAULT_ROWS`` rows whose base logits hold a NaN on an edge between
two shards (the last column of one rank's shard or the first of the next;
so world >= 2) returns one wrong draft token. Every other call is the
golden's, bit for bit. The minimal scenario for the fault is therefore one
call of exactly 5 rows at world 2 with one NaN at such a column. It is
selected only through ``$RANKCHECK_TEST_PLANTED_SYSTEM``
(``harness.families.planted_system``), which only tests set.
"""

from __future__ import annotations

import torch

from golden.markov_sharded import GoldenMarkovSharded

FAULT_ROWS = 5
PLANTED = "markov_sharded=tests.harness.planted_fault:ShardEdgeFault"


def internal_edge_columns(vocab: int, world: int) -> list[int]:
    """The columns on either side of every boundary between two shards."""
    shard = vocab // world
    return [c for k in range(1, world) for c in (k * shard - 1, k * shard)]


class ShardEdgeFault(GoldenMarkovSharded):
    """The golden system, wrong in draft token [0, 0] when rows >= 5 and a NaN sits on an inner shard edge."""

    def launch(self, call_inputs, call_params):
        """The golden launch, then the planted corruption where its condition holds."""
        out = super().launch(call_inputs, call_params)
        base = call_inputs["base_logits"]
        rows = (call_params or {}).get("rows") or base.shape[0]
        edges = internal_edge_columns(self.vocab, self.world)
        if rows >= FAULT_ROWS and edges and bool(torch.isnan(base[:rows, :, edges].float()).any()):
            out = dict(out)
            out["draft_tokens"] = out["draft_tokens"].clone()
            out["draft_tokens"][0, 0] = (out["draft_tokens"][0, 0] + 1) % self.vocab
        return out
