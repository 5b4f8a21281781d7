"""Adapter of seed 001's fused Markov loop: ``golden.markov_fused`` vs ``kernels.markov_fused.host``.

Compared outputs: ``tokens`` [rows, steps], ``cache`` [max_reqs, steps, V]
(every rank ends with the full vocabulary) and ``emb`` [rows, R]. The TP
size travels in config key ``tp``.

Kernel side (docs/interfaces.md): ``harness.families.markov_fused.kernel.FusedMarkovLoop``,
the seed's draft loop driven over the public ``kernels.markov_fused.host.MarkovKernels``
(``anchor_embed``, per step the GEMV and ``step``, sharded ``gather_packets`` and ``pick``, then
``gather_draft`` and ``cache_fill``: the gathers on the device through the rank's fabric), takes its weights and
call inputs as CUDA tensors (the adapter copies them to the rank's device,
layout kept, and the kernel's in-place ``cache`` write lands on that copy),
and the bias GEMV as ``bias_fn``: ``harness.families.markov_fused.bias.HARNESS_BIAS``
(``kernels.markov_fused.head_gemv.HeadGemv`` where the row length is a multiple of
32, else the exact ``golden.markov_fused.markov_bias``). The golden's config
``bias`` names the same GEMV's bits: the architecture facts' ``mma_model``
(``hopper_mma`` on the H200, ``golden.markov_fused.mma_bias``), for the
golden system and the reference alike, so the stored golden bits
(``golden/markov_fused/golden_bits.json``) are that model's. ``pdl``,
``sharded``, ``max_rows``, ``max_steps`` and ``timeout_ns`` (the exchange's
size and deadline) are kernel-only config keys; ``bias`` and ``rcp_table``
golden-only.
The golden's ``rcp_table`` (the ``div.full.f32`` reciprocals of temperatures
that are not powers of two) comes from the architecture's facts
(``harness.families.arch_facts``), so its whole fp32 contract (libdevice logf and
tanhf, the Gumbel noise, ``div.full.f32``, the GEMV) is that of the GPU
probed; an architecture without facts makes this family's cases not
available.

Graph scenarios are captured wherever the kernel system can be
(``FusedMarkovLoop.graph_capture_problem``); where it cannot, the case fails
with the reason (``harness.rank.case_run``).
"""

from harness.families.family_adapter import FamilyAdapter

ADAPTER = FamilyAdapter(
    family="markov_fused",
    golden_module="golden.markov_fused",
    kernel_module="harness.families.markov_fused.kernel",
    tp_key="tp",
    output_axes={
        "tokens": ("row", "step"),
        "cache": ("row", "step", "vocab"),
        "emb": ("row", "index"),
    },
    kernel_only_config=("pdl", "sharded", "max_rows", "max_steps", "timeout_ns"),
    golden_only_config=("rcp_table", "bias"),
    arch_facts={"rcp_table": "reciprocals", "bias": "mma_model"},
    kernel_kwargs={"bias_fn": "harness.families.markov_fused.bias:HARNESS_BIAS"},
    kernel_inputs_on_device=True,
    fuzz_draw="harness.families.markov_fused.fuzz:draw",
    nightly_scenario="markov_fused/basic",
    # A skipped call: the exchange pairs calls by each system's own launch count, so the next call meets the
    # peers' current one and the agreement check after the launch names it. Disagreeing rows or steps: the
    # kernel system compares them through the fabric before it launches (FusedMarkovLoop._check_same_call).
    settled_in_step=frozenset({"skip_launch", "rank_disagree"}),
)
