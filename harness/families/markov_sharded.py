"""Adapter of seed 000's sharded Markov sampler: ``golden.markov_sharded`` vs ``kernels.markov.sharded``.

Compared outputs: ``draft_tokens`` [rows, steps] and ``logits_cache``
[max_reqs, steps, V] (full vocabulary on every rank). The TP size travels
in config key ``world``.
"""

from harness.families import FamilyAdapter

ADAPTER = FamilyAdapter(
    family="markov_sharded",
    golden_module="golden.markov_sharded",
    kernel_module="kernels.markov.sharded",
    tp_key="world",
    start_keys={"launches": "launch_counter_start"},
    output_axes={
        "draft_tokens": ("row", "step"),
        "logits_cache": ("row", "step", "vocab"),
    },
)
