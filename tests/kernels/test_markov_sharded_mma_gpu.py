"""The golden's models of the kernel's bias against the tensor cores.

The kernel's bias is 16 chained ``mma.sync.m16n8k16`` (BF16 in, FP32
accumulate). ``golden.markov_sharded.BIAS_FUNCTIONS`` holds three models of
it: ``fp32_k_order`` (sequential FP32), ``mma_chain`` (exact sum per MMA,
rounded to nearest) and ``hopper_mma`` (terms truncated to 2^(E-25) of the
largest exponent, the sum rounded toward zero: fitted to the first H200
report). The test requires the model the harness uses on this GPU (its
architecture's facts, ``golden/data/arch/<arch>.json``, ``harness.families.arch_facts``)
to match every sum. The operands and the comparison are ``harness.calibration.mma``'s,
which ``harness golden --probe`` runs over the full set. The probe (``kernels.markov_sharded.probe``) runs
the kernel's own chain and fragment layout on given operands; this test
compares its FP32 bits with the model on random operands: ordinary
(N(0, 1) BF16), adversarial exponent spreads (operands 2^e with e spread
over +-40, random signs, so products of very different magnitudes meet in
one MMA and in the accumulator), and cancellation (pairs that cancel
exactly, leaving tiny residues next to large terms).

The models run on the CPU; the report counts mismatches against each.

``python tests/kernels/test_markov_sharded_mma_gpu.py report OUT.json [quick|full]``
runs the comparison in a process of its own (no sampler kernel shares its
CUDA context, so the evidence survives a sampler that traps), writes counts
and examples per operand family to ``OUT.json`` after each family and prints
a table: sums compared, mismatches against each model, a few mismatches of
the harness's model. ``quick`` (about 10^5 sums per
family; the CPU models take most of the time) fits a short GPU session,
``full`` compares millions.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from golden.markov_sharded import BIAS_FUNCTIONS  # noqa: E402
from harness.families.arch_facts import choose_arch, facts_for  # noqa: E402
from harness.calibration.mma import REPORT_SIZES, compare, probe_models  # noqa: E402

pytestmark = pytest.mark.gpu


def harness_model() -> str:
    """The MMA model the harness uses on this GPU: its architecture's facts (NotAvailable when it has none)."""
    return facts_for(choose_arch()).mma_model


@pytest.mark.parametrize("kind,tiles,sets", [("normal", 128, 8), ("spread", 8, 2), ("cancel", 32, 4)])
def test_tensor_cores_match_the_harness_bias_model(kind, tiles, sets):
    model = harness_model()
    result = compare(kind, tiles, sets, seed=17)
    assert result["mismatches_by_model"][model] == 0, json.dumps(
        {"model": model, "sums": result["sums"], "mismatches_by_model": result["mismatches_by_model"],
         "examples": result["examples_by_model"][model]}, indent=1)


def report(path: str, size: str = "quick") -> None:
    """The comparison at ``REPORT_SIZES[size]`` (tiles, sets) per family: JSON at ``path`` and a table on stdout."""
    model = harness_model()
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "size": size,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": []}
    names = list(BIAS_FUNCTIONS)
    print(f"{'family':8} {'sums':>8} " + " ".join(f"{name + '_bad':>16}" for name in names) + f" {'s':>5}", flush=True)

    def show(result: dict) -> None:
        """Print one family's row and examples, and rewrite the JSON with it."""
        result.update(model=model, mismatches=result["mismatches_by_model"][model],
                      examples=result.pop("examples_by_model")[model])
        out["results"].append(result)
        print(f"{result['kind']:8} {result['sums']:>8} " + " ".join(f"{result['mismatches_by_model'][n]:>16}"
                                                                     for n in names) + f" {result['seconds']:>5}",
              flush=True)
        for example in result["examples"][:2]:
            print("   ", json.dumps(example), flush=True)
        with open(path, "w") as fh:
            json.dump(out, fh, indent=1)

    probe_models(size, progress=show)


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "report" and (len(sys.argv) == 3 or sys.argv[3] in REPORT_SIZES):
        report(sys.argv[2], *sys.argv[3:])
        raise SystemExit(0)
    raise SystemExit(f"usage: {sys.argv[0]} report OUT.json [{'|'.join(REPORT_SIZES)}]")
