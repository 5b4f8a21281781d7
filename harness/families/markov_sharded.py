"""Adapter of seed 000's sharded Markov sampler: ``golden.markov_sharded`` vs ``kernels.markov.sharded``.

Compared outputs: ``draft_tokens`` [rows, steps] and ``logits_cache``
[max_reqs, steps, V] (full vocabulary on every rank). The TP size travels
in config key ``world``.

The golden gets two entries from the harness, on the CPU path (the golden
system) and for the reference alike: ``rcp_table`` (the GPU's measured
``div.full.f32`` reciprocals, ``golden/data/rcp_f32_sm_90.json``: scenarios
use temperatures such as 0.6 that are not powers of two) and ``bias_fn``
(``BIAS_MODEL``). The kernel-only keys (``timeout_ns``, ``ctas``,
``ranks_per_device``) are stripped for the golden, the golden-only ones for
the kernel.
"""

from harness.families import FamilyAdapter

# The golden's model of the kernel's bias (mma.sync m16n8k16 chains, fp32 accumulate):
# "mma_chain" (per-MMA exact sum, the tensor-core hypothesis) or "fp32_k_order" (the
# provisional sequential fp32 model). The GPU MMA probe decides it: the report of
# tests/kernels/test_markov_sharded_mma_gpu.py (`... report OUT.json`) says which model
# reproduces the H200's bits; change this one constant to follow it.
BIAS_MODEL = "mma_chain"

# The reciprocal table the golden reads (golden.fp32.load_rcp_table: golden/data/rcp_f32_<arch>.json).
RCP_TABLE_ARCH = "sm_90"

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
    kernel_only_config=("timeout_ns", "ctas", "ranks_per_device"),
    golden_only_config=("bias_fn", "rcp_table"),
    golden_config_extras={"bias_fn": BIAS_MODEL, "rcp_table": RCP_TABLE_ARCH},
)
