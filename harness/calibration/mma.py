"""The MMA probe of ``harness golden --probe``: which of the golden's bias models the tensor cores follow.

A kernel's bias is 16 chained ``mma.sync.m16n8k16`` (BF16 in, FP32
accumulate), and how the tensor core rounds inside one MMA is not
documented. ``golden.mma_bias.BIAS_FUNCTIONS`` holds the candidate
models (``fp32_k_order``, ``mma_chain``, ``hopper_mma``, ...). The family
whose kernel runs that chain declares the function that runs it on the GPU
(``MMA_CHAIN`` of its calibration module, ``harness.calibration.family_probes``):
the kernel's own chain and fragment layout on given operands
(``gpu_chain``); ``compare`` counts, for one operand
family, the sums where each model's FP32 bits differ from the hardware's and
keeps a few examples per model. The families (``operands``): ordinary
(N(0, 1) BF16), adversarial exponent spreads (operands 2^e with e spread
over +-40, random signs, so products of very different magnitudes meet in
one MMA and in the accumulator), and cancellation (pairs that cancel
exactly, leaving tiny residues next to large terms).

``probe_models(size)`` runs every family at ``REPORT_SIZES[size]`` with the
seeds the H200 runs used (``1000 + family index``): ``full`` is the run whose
counts ``golden/data/arch/sm_90.json`` keeps as evidence (1,196,032 sums),
``quick`` a short one. ``fitting_models`` names the models with no mismatch
on any family: the architecture's model is the first of them in
``BIAS_FUNCTIONS`` order, and when there is none the probe reports each
model's mismatches with their examples. The models run on the CPU and take
most of the time (about 80 s for ``full`` on 16 cores).

The hardware chain is a parameter (``chain``, default the GPU probe), so the
bookkeeping is tested on the CPU with a model standing in for the tensor cores.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from golden.mma_bias import BIAS_FUNCTIONS
from harness.calibration.family_probes import declared

KINDS = ("normal", "spread", "cancel")
REPORT_SIZES = {
    "quick": {"normal": (512, 2), "spread": (32, 4), "cancel": (128, 2)},
    "full": {"normal": (512, 16), "spread": (32, 4), "cancel": (128, 8)},
}
EXAMPLES = 8

Chain = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


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


def gpu_chain(head: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
    """The MMA chain a family declares (its ``MMA_CHAIN``, the first in the families' order) run on the GPU, on the CPU."""
    chains = declared("MMA_CHAIN")
    if not chains:
        raise RuntimeError("no family declares an MMA_CHAIN (harness/families/<family>/calibration.py)")
    return chains[0](head, embeds)


def compare(kind: str, tiles: int, sets: int, seed: int, *, chain: Chain = gpu_chain,
            examples: int = EXAMPLES) -> dict:
    """The hardware ``chain`` vs every golden bias model on one operand family: mismatch counts and examples."""
    head, embeds = operands(kind, tiles, sets, seed, "cpu")
    got = chain(head, embeds)
    counts = {name: 0 for name in BIAS_FUNCTIONS}
    shown: dict[str, list] = {name: [] for name in BIAS_FUNCTIONS}
    for s in range(sets):
        got_bits = got[s].view(torch.int32)
        for name, model in BIAS_FUNCTIONS.items():
            # The models run on the CPU: their exact-sum fallbacks read elements one by one.
            want = model(embeds[s], head)
            want_bits = want.view(torch.int32)
            bad = (got_bits != want_bits).nonzero()
            counts[name] += len(bad)
            for r, v in bad[: max(0, examples - len(shown[name]))].tolist():
                shown[name].append({"set": s, "row": r, "head_row": v, "gpu": f"{got[s, r, v].item():.9e}",
                                    "gpu_bits": f"0x{got_bits[r, v].item() & 0xFFFFFFFF:08X}",
                                    "model": f"{want[r, v].item():.9e}",
                                    "model_bits": f"0x{want_bits[r, v].item() & 0xFFFFFFFF:08X}"})
    return {"kind": kind, "tiles": tiles, "sets": sets, "seed": seed, "sums": got.numel(),
            "mismatches_by_model": counts, "examples_by_model": shown}


def probe_models(size: str = "full", *, chain: Chain = gpu_chain, sizes: dict | None = None,
                 progress: Callable[[dict], None] = lambda result: None) -> list[dict]:
    """``compare`` on every operand family at ``(sizes or REPORT_SIZES)[size]``, with the recorded runs' seeds."""
    results = []
    for kind, (tiles, sets) in (sizes or REPORT_SIZES)[size].items():
        start = time.monotonic()
        result = compare(kind, tiles, sets, seed=1000 + KINDS.index(kind), chain=chain)
        result["seconds"] = round(time.monotonic() - start, 1)
        results.append(result)
        progress(result)
    return results


def fitting_models(results: Sequence[dict]) -> list[str]:
    """The models without a mismatch on any probed family, in ``BIAS_FUNCTIONS`` order."""
    return [name for name in BIAS_FUNCTIONS if results and all(r["mismatches_by_model"][name] == 0 for r in results)]


def evidence(results: Sequence[dict]) -> list[dict]:
    """The facts file's record of a probe: per family its size, seed, sums and every model's mismatch count."""
    keys = ("kind", "tiles", "sets", "seed", "sums", "mismatches_by_model")
    return [{k: r[k] for k in keys} for r in results]


__all__ = ["KINDS", "REPORT_SIZES", "compare", "evidence", "fitting_models", "gpu_chain", "operands", "probe_models"]
