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

# The golden's model of the kernel's bias (mma.sync m16n8k16 chains, fp32 accumulate). The GPU
# MMA probe decides it (tests/kernels/test_markov_sharded_mma_gpu.py `report`): on the H200
# (docs/results/markov_sharded_mma_probe_2026-11-29.json) neither "mma_chain" (exact sum per
# MMA, one RN) nor "fp32_k_order" matched, while "hopper_mma" (terms truncated to 2^(E-25)
# of the largest exponent, sum rounded toward zero) reproduces every recorded example and
# the exact mismatch counts of the other two models; the full probe then matched it on all
# 1,196,032 sums (docs/results/gpu-run-3/markov_sharded_mma_full.json). Change this one
# constant to follow the probe on another GPU.
BIAS_MODEL = "hopper_mma"

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
