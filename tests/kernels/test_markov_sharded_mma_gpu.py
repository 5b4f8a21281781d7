"""The bias accumulation hypothesis of golden/markov_sharded.py against the tensor cores.

``golden.markov_sharded.mma_chain_bias`` models the kernel's bias as 16
chained ``mma.sync.m16n8k16`` (BF16 in, FP32 accumulate), each adding the
exact sum of its 16 products to the accumulator and rounding once to FP32
(round to nearest even). The probe (``kernels.markov.sharded_probe``) runs
the kernel's own chain and fragment layout on given operands; this test
compares its FP32 bits with the model on random operands: ordinary
(N(0, 1) BF16), adversarial exponent spreads (operands 2^e with e spread
over +-40, random signs, so products of very different magnitudes meet in
one MMA and in the accumulator), and cancellation (pairs that cancel
exactly, leaving tiny residues next to large terms).

The models run on the CPU (``mma_chain_bias``: exact double products, exact
sums, Python integers where a double sum could round; ``fp32_k_order_bias``
is reported beside it for comparison).

``python tests/kernels/test_markov_sharded_mma_gpu.py report OUT.json [quick|full]``
runs the comparison in a process of its own (no sampler kernel shares its
CUDA context, so the evidence survives a sampler that traps), writes counts
and examples per operand family to ``OUT.json`` after each family and prints
a table: sums compared, mismatches against ``mma_chain_bias`` and against
``fp32_k_order_bias``, a few mismatches. ``quick`` (about 10^5 sums per
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

from golden.markov_sharded import fp32_k_order_bias, mma_chain_bias  # noqa: E402

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
    """Probe vs ``mma_chain_bias`` (and vs ``fp32_k_order_bias``) on one operand family: counts and examples."""
    from kernels.markov.sharded_probe import mma_chain

    device = torch.device("cuda", torch.cuda.current_device())
    head, embeds = operands(kind, tiles, sets, seed, "cpu")
    got = mma_chain(head.to(device), embeds.to(device)).cpu()
    mismatches, k_order_mismatches, shown = 0, 0, []
    for s in range(sets):
        # The models run on the CPU: their exact-sum fallback reads elements one by one.
        want = mma_chain_bias(embeds[s], head)
        want_k = fp32_k_order_bias(embeds[s], head)
        got_bits, want_bits = got[s].view(torch.int32), want.view(torch.int32)
        bad = (got_bits != want_bits).nonzero()
        mismatches += len(bad)
        k_order_mismatches += int((got_bits != want_k.view(torch.int32)).sum())
        for r, v in bad[: max(0, examples - len(shown))].tolist():
            shown.append({"set": s, "row": r, "head_row": v, "gpu": f"{got[s, r, v].item():.9e}",
                          "gpu_bits": f"0x{got_bits[r, v].item() & 0xFFFFFFFF:08X}",
                          "model": f"{want[r, v].item():.9e}", "model_bits": f"0x{want_bits[r, v].item() & 0xFFFFFFFF:08X}"})
    return {"kind": kind, "sums": got.numel(), "mismatches": mismatches, "k_order_mismatches": k_order_mismatches,
            "examples": shown}


@pytest.mark.parametrize("kind,tiles,sets", [("normal", 128, 8), ("spread", 8, 2), ("cancel", 32, 4)])
def test_mma_chain_matches_the_golden_model(kind, tiles, sets):
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
    print(f"{'family':8} {'sums':>8} {'mma_chain_bad':>13} {'fp32_k_order_bad':>16} {'s':>5}", flush=True)
    for kind, (tiles, sets) in REPORT_SIZES[size].items():
        start = time.time()
        result = compare(kind, tiles, sets, seed=1000 + KINDS.index(kind))
        result["seconds"] = round(time.time() - start, 1)
        out["results"].append(result)
        print(f"{kind:8} {result['sums']:>8} {result['mismatches']:>13} {result['k_order_mismatches']:>16} "
              f"{result['seconds']:>5}", flush=True)
        for example in result["examples"][:2]:
            print("   ", json.dumps(example), flush=True)
        with open(path, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    if len(sys.argv) in (3, 4) and sys.argv[1] == "report" and (len(sys.argv) == 3 or sys.argv[3] in REPORT_SIZES):
        report(sys.argv[2], *sys.argv[3:])
        raise SystemExit(0)
    raise SystemExit(f"usage: {sys.argv[0]} report OUT.json [{'|'.join(REPORT_SIZES)}]")
