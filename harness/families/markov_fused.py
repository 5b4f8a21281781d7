"""Adapter of seed 001's fused Markov loop: ``golden.markov_fused`` vs ``kernels.markov.fused``.

Compared outputs: ``tokens`` [rows, steps], ``cache`` [max_reqs, steps, V]
(every rank ends with the full vocabulary) and ``emb`` [rows, R]. The TP
size travels in config key ``tp``.
"""

from harness.families import FamilyAdapter

ADAPTER = FamilyAdapter(
    family="markov_fused",
    golden_module="golden.markov_fused",
    kernel_module="kernels.markov.fused",
    tp_key="tp",
    output_axes={
        "tokens": ("row", "step"),
        "cache": ("row", "step", "vocab"),
        "emb": ("row", "index"),
    },
)
