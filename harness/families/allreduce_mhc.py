"""Adapter of seed 004's all-reduce + mHC: ``golden.allreduce`` vs ``kernels.allreduce``.

Compared outputs: ``residual_out`` [M, hc, H], ``layer_input`` [M, H]
(absent with ``residual_only``), and with ``quantize`` the MXFP8
``mxfp8_values`` [M, H] and the flat swizzled ``mxfp8_scales``; an output
the reference does not produce for a config is not compared. The TP size
travels in config key ``tp``.

Kernel side: ``harness.families.allreduce_mhc_kernel.AllReduceMHCSystem``,
the family's generic ``launch`` over the public ``kernels.allreduce.AllReduceMHC``
(``__call__`` / ``finalize`` on this rank's shard of each call).
"""

from harness.families.family_adapter import FamilyAdapter

ADAPTER = FamilyAdapter(
    family="allreduce_mhc",
    golden_module="golden.allreduce",
    kernel_module="harness.families.allreduce_mhc_kernel",
    tp_key="tp",
    start_keys={"generation_ll": "start_generation", "generation_bt": "start_generation"},
    resume_keys={"generation_ll": "generation_next", "generation_bt": "bt_generation_next"},
    output_axes={
        "residual_out": ("row", "stream", "hidden"),
        "layer_input": ("row", "hidden"),
        "mxfp8_values": ("row", "hidden"),
        "mxfp8_scales": ("byte",),
    },
)
