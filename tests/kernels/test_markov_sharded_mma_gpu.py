"""The golden's models of the kernel's bias against the tensor cores.

The kernel's bias is 16 chained ``mma.sync.m16n8k16`` (BF16 in, FP32
accumulate). ``golden.markov_sharded.BIAS_FUNCTIONS`` holds three models of
it: ``fp32_k_order`` (sequential FP32), ``mma_chain`` (exact sum per MMA,
rounded to nearest) and ``hopper_mma`` (terms truncated to 2^(E-25) of the
largest exponent, the sum rounded toward zero: fitted to the first H200
report). The test requires the model the harness uses
(``harness.families.markov_sharded.BIAS_MODEL``) to match every sum. The probe (``kernels.markov.sharded_probe``) runs
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
from harness.families.markov_sharded import BIAS_MODEL  # noqa: E402

pytestmark = pytest.mark.gpu

KINDS = ("normal", "spread", "cancel")


def operands(kind: str, tiles: int, sets: int, seed: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """BF16 head ``[16 tiles, 256]`` and embeddings ``[sets, 8, 256]`` of one operand family."""
    g = torch.Generator().manual_seed(seed)
    n = tiles * 16

    def draw(*shape):
        if kind == "normal":
            return torch.randn(*shape, generator=g)
        sign = torch.randint(0, 2, shape, generator=g).float() * 2 - 1
        mantissa = 1 + torch.randint(0, 128, shape, generator=g).float() / 128
        exponent = torch.randint(-40, 41, shape, generator=g).float()
        return sign * mantissa * torch.exp2(exponent)

    head = draw(n, 256)
    embeds = draw(sets, 8, 256)
    if kind == "cancel":
        # A quarter of the products cancel their neighbour exactly, and in
        # set 0 some terms are tiny next to the others.
        head[:, 1::4] = -head[:, 0::4]
        embeds[..., 1::4] = embeds[..., 0::4]
        embeds[0, :, 2::8] *= 2.0**-30
    return head.to(torch.bfloat16).to(device), embeds.to(torch.bfloat16).to(device)


def compare(kind: str, tiles: int, sets: int, seed: int, examples: int = 8) -> dict:
    """Probe vs every golden bias model on one operand family: mismatch counts, examples against ``BIAS_MODEL``."""
    from kernels.markov.sharded_probe import mma_chain

    device = torch.device("cuda", torch.cuda.current_device())
    head, embeds = operands(kind, tiles, sets, seed, "cpu")
    got = mma_chain(head.to(device), embeds.to(device)).cpu()
    counts, shown = {name: 0 for name in BIAS_FUNCTIONS}, []
    for s in range(sets):
        got_bits = got[s].view(torch.int32)
        for name, model in BIAS_FUNCTIONS.items():
            # The models run on the CPU: their exact-sum fallbacks read elements one by one.
            want = model(embeds[s], head)
            want_bits = want.view(torch.int32)
            bad = (got_bits != want_bits).nonzero()
            counts[name] += len(bad)
            if name != BIAS_MODEL:
                continue
            for r, v in bad[: max(0, examples - len(shown))].tolist():
                shown.append({"set": s, "row": r, "head_row": v, "gpu": f"{got[s, r, v].item():.9e}",
                              "gpu_bits": f"0x{got_bits[r, v].item() & 0xFFFFFFFF:08X}",
                              "model": f"{want[r, v].item():.9e}",
                              "model_bits": f"0x{want_bits[r, v].item() & 0xFFFFFFFF:08X}"})
    return {"kind": kind, "sums": got.numel(), "model": BIAS_MODEL, "mismatches": counts[BIAS_MODEL],
            "mismatches_by_model": counts, "examples": shown}


@pytest.mark.parametrize("kind,tiles,sets", [("normal", 128, 8), ("spread", 8, 2), ("cancel", 32, 4)])
def test_tensor_cores_match_the_harness_bias_model(kind, tiles, sets):
    result = compare(kind, tiles, sets, seed=17)
    assert result["mismatches"] == 0, json.dumps(result, indent=1)


REPORT_SIZES = {
    "quick": {"normal": (512, 2), "spread": (32, 4), "cancel": (128, 2)},
    "full": {"normal": (512, 16), "spread": (32, 4), "cancel": (128, 8)},
}


def report(path: str, size: str = "quick") -> None:
    """The comparison at ``REPORT_SIZES[size]`` (tiles, sets) per family: JSON at ``path`` and a table on stdout."""
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "size": size,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": []}
    names = list(BIAS_FUNCTIONS)
    print(f"{'family':8} {'sums':>8} " + " ".join(f"{name + '_bad':>16}" for name in names) + f" {'s':>5}", flush=True)
    for kind, (tiles, sets) in REPORT_SIZES[size].items():
        start = time.time()
        result = compare(kind, tiles, sets, seed=1000 + KINDS.index(kind))
        result["seconds"] = round(time.time() - start, 1)
        out["results"].append(result)
        print(f"{kind:8} {result['sums']:>8} " + " ".join(f"{result['mismatches_by_model'][n]:>16}" for n in names)
              + f" {result['seconds']:>5}", flush=True)
        for example in result["examples"][:2]:
            print("   ", json.dumps(example), flush=True)
        with open(path, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "report" and (len(sys.argv) == 3 or sys.argv[3] in REPORT_SIZES):
        report(sys.argv[2], *sys.argv[3:])
        raise SystemExit(0)
    raise SystemExit(f"usage: {sys.argv[0]} report OUT.json [{'|'.join(REPORT_SIZES)}]")
