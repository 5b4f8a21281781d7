"""Adapter of seed 000's sharded Markov sampler: ``golden.markov_sharded`` vs ``kernels.markov_sharded.host``.

Compared outputs: ``draft_tokens`` [rows, steps] and ``logits_cache``
[max_reqs, steps, V] (full vocabulary on every rank). The TP size travels
in config key ``world``.

The golden gets two entries from the architecture's facts (``golden.arch``,
chosen on the rank by ``harness.families.arch_facts``: the GPU's, else ``--arch``), on
the CPU path (the golden system) and for the reference alike: ``bias_fn``,
the facts' ``mma_model`` (the model of ``golden.mma_bias.BIAS_FUNCTIONS``
that the GPU's ``mma.sync`` chain follows, decided by ``harness golden
--probe``: ``hopper_mma`` on the H200), and ``rcp_table``, the facts'
measured ``div.full.f32`` reciprocals (scenarios use temperatures such as
0.6 that are not powers of two). An architecture without facts makes this
family's cases not available, naming the probe command. The kernel-only
keys (``timeout_ns``, ``ctas``, ``ranks_per_device``) are stripped for the
golden, the golden-only ones for the kernel.

Kernel side: ``harness.families.markov_sharded.kernel.ShardedMarkovSystem``,
the family's generic ``launch`` over the public
``kernels.markov_sharded.host.ShardedMarkovSampler`` (one ``__call__`` per launch).
"""

from harness.families.family_adapter import FamilyAdapter

ADAPTER = FamilyAdapter(
    family="markov_sharded",
    golden_module="golden.markov_sharded",
    kernel_module="harness.families.markov_sharded.kernel",
    tp_key="world",
    start_keys={"launches": "launch_counter_start"},
    resume_keys={"launches": "launches"},
    output_axes={
        "draft_tokens": ("row", "step"),
        "logits_cache": ("row", "step", "vocab"),
    },
    kernel_only_config=("timeout_ns", "ctas", "ranks_per_device"),
    golden_only_config=("bias_fn", "rcp_table"),
    arch_facts={"bias_fn": "mma_model", "rcp_table": "reciprocals"},
    fuzz_draw="harness.families.markov_sharded.fuzz:draw",
    nightly_scenario="markov_sharded/basic",
    nightly_hang=True,
    vocab_unit_per_rank=16,  # contracts.markov_sharded.TILE_ROWS, not imported: torch stays out of the registry's import
    # A skipped call: the mailbox tags come from each sampler's own launch counter, so the next call meets the
    # peers' current one and the agreement check after the launch names it (a repeated one waits: isolated).
    settled_in_step=frozenset({"skip_launch"}),
)
