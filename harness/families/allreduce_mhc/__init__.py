"""Adapter of seed 004's all-reduce + mHC: ``golden.allreduce_mhc`` vs ``kernels.allreduce_mhc``.

Compared outputs: ``residual_out`` [M, hc, H], ``layer_input`` [M, H]
(absent with ``residual_only``), and with ``quantize`` the MXFP8
``mxfp8_values`` [M, H] and the flat swizzled ``mxfp8_scales``; an output
the reference does not produce for a config is not compared. The TP size
travels in config key ``tp``.

Kernel side: ``harness.families.allreduce_mhc.kernel.AllReduceMHCSystem``,
the family's generic ``launch`` over the public ``kernels.allreduce_mhc.AllReduceMHC``
(``__call__`` / ``finalize`` on this rank's shard of each call).

Protocol check (``protocol_problem``): the kernels report which protocol a
call ran through the generation state they advance on the device (LL's
consumer moves ``generation_next``, BT's owner reduce ``bt_generation_next``;
``state()`` reads both). Every call must have moved exactly the one its
``protocol`` param names, or, under ``auto``, the one the config's
``bt_min_rows`` / ``bt_min_finalize_rows`` pick (``golden.allreduce_mhc.uses_bt``):
a scenario whose LL or BT call ran the other protocol fails.
"""

from types import SimpleNamespace
from typing import Any, Mapping

from harness.families.family_adapter import FamilyAdapter


def protocol_problem(config: Mapping, call_inputs: Mapping, call_params: Any, before: Mapping,
                     after: Mapping) -> str | None:
    """Why the call did not run the protocol it names or implies (from ``state()`` before and after), or None."""
    from contracts.allreduce_mhc import check_call_params  # noqa: PLC0415 - torch stays out of the registry's import
    from golden.allreduce_mhc import check_config, uses_bt  # noqa: PLC0415 - torch stays out of the registry's import

    finalize, protocol = check_call_params(call_params)
    rows = int(call_inputs["residual"].shape[0])
    call = SimpleNamespace(protocol=protocol, finalize=finalize, rows=rows)  # what uses_bt reads of a call
    expected = "bt" if uses_bt(check_config(config), call) else "ll"
    moved = [name for name, key in (("ll", "generation_next"), ("bt", "bt_generation_next"))
             if before.get(key) != after.get(key)]
    if moved == [expected]:
        return None
    ran = " and ".join(moved) if moved else "neither protocol"
    return (f"{rows} rows ({'finalize, ' if finalize else ''}protocol {protocol}) should run {expected.upper()}, "
            f"but the kernels advanced {ran.upper()} (state {dict(before)} -> {dict(after)})")

ADAPTER = FamilyAdapter(
    family="allreduce_mhc",
    golden_module="golden.allreduce_mhc",
    kernel_module="harness.families.allreduce_mhc.kernel",
    tp_key="tp",
    start_keys={"generation_ll": "start_generation", "generation_bt": "start_generation"},
    resume_keys={"generation_ll": "generation_next", "generation_bt": "bt_generation_next"},
    protocol_check="harness.families.allreduce_mhc:protocol_problem",
    output_axes={
        "residual_out": ("row", "stream", "hidden"),
        "layer_input": ("row", "hidden"),
        "mxfp8_values": ("row", "hidden"),
        "mxfp8_scales": ("byte",),
    },
    fuzz_draw="harness.families.allreduce_mhc.fuzz:draw",
    nightly_scenario="allreduce_mhc/basic_ll",
    # A rank that skips a call meets its peers' current call with its next one (Lamport slots and BT flags pair
    # calls by each system's own generation), so nothing spins; the agreement check after the launch names it.
    settled_in_step=frozenset({"skip_launch"}),
)
