"""Adapter of seed 001's fused Markov loop: ``golden.markov_fused`` vs ``kernels.markov.fused``.

Compared outputs: ``tokens`` [rows, steps], ``cache`` [max_reqs, steps, V]
(every rank ends with the full vocabulary) and ``emb`` [rows, R]. The TP
size travels in config key ``tp``.

Kernel side (docs/interfaces.md): ``harness.families.markov_fused_kernel.FusedMarkovLoop``,
the seed's draft loop driven over the public ``kernels.markov.fused.MarkovKernels``
(``anchor_embed``, per step the GEMV and ``step``, sharded ``gather_packets`` and ``pick``, then
``gather_draft`` and ``cache_fill``: the gathers on the device through the rank's fabric), takes its weights and
call inputs as CUDA tensors (the adapter copies them to the rank's device,
layout kept, and the kernel's in-place ``cache`` write lands on that copy),
and the bias GEMV as ``bias_fn``: the golden's exact
``golden.markov_fused.markov_bias``, so that both sides' step kernels see
identical operands (the kernel's default is a plain bf16 matmul). ``pdl``,
``sharded``, ``max_rows``, ``max_steps`` and ``timeout_ns`` (the exchange's
size and deadline) are kernel-only config keys; the golden rejects them.
The golden's ``rcp_table`` (the ``div.full.f32`` reciprocals of temperatures
that are not powers of two) comes from the architecture's facts
(``harness.arch_facts``), so its whole fp32 contract (libdevice logf and
tanhf, the Gumbel noise, ``div.full.f32``) is that of the GPU probed; an
architecture without facts makes this family's cases not available.

Graph scenarios run eagerly here (the report says so): that exact bias
resolves rare inexact sums on the host, which a CUDA graph cannot capture
(the loop's own launches, the exchange included, can be captured at any tp). The kernel's own
capture and replay is checked by ``tests/kernels/test_markov_fused_gpu.py``
with a device GEMV.
"""

from harness.families import FamilyAdapter

ADAPTER = FamilyAdapter(
    family="markov_fused",
    golden_module="golden.markov_fused",
    kernel_module="harness.families.markov_fused_kernel",
    tp_key="tp",
    output_axes={
        "tokens": ("row", "step"),
        "cache": ("row", "step", "vocab"),
        "emb": ("row", "index"),
    },
    kernel_only_config=("pdl", "sharded", "max_rows", "max_steps", "timeout_ns"),
    golden_only_config=("rcp_table",),
    arch_facts={"rcp_table": "reciprocals"},
    kernel_kwargs={"bias_fn": "golden.markov_fused:markov_bias"},
    kernel_inputs_on_device=True,
    graph_capture_problem="the bias GEMV handed to the kernel (golden.markov_fused.markov_bias, exact sums) "
    "synchronizes with the host",
)
