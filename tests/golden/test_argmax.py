"""golden.argmax: the first-NaN-else-first-max order under any split."""

from __future__ import annotations

import math
import random

import pytest
import torch

from golden.argmax import argmax_pair, combine, combine_in_order, first_nan_first_max, reduce_pairs
from golden.fp32 import f32_bits

NAN, INF = math.nan, math.inf
# A small value alphabet so that ties, NaN, signed zeros and -inf are common.
ALPHABET = [NAN, -INF, INF, -0.0, 0.0, 1.0, -1.0, 2.5, 2.5, -INF, 1e-45, -1e-45]


def python_first_nan_first_max(row: list[float]) -> int:
    """Plain-loop reference of the order."""
    for i, v in enumerate(row):
        if math.isnan(v):
            return i
    best = 0
    for i, v in enumerate(row):
        if v > row[best]:
            best = i
    return best


def random_rows(rng: random.Random, rows: int, width: int) -> torch.Tensor:
    """Rows drawn from the alphabet, some NaN-free, some all -inf."""
    out = []
    for r in range(rows):
        kind = r % 4
        if kind == 0:
            row = [rng.choice(ALPHABET[1:]) for _ in range(width)]
        elif kind == 1:
            row = [-INF] * width
        else:
            row = [rng.choice(ALPHABET) for _ in range(width)]
        out.append(row)
    return torch.tensor(out, dtype=torch.float32)


def test_matches_plain_loop():
    rng = random.Random(1)
    x = random_rows(rng, 200, 37)
    assert first_nan_first_max(x).tolist() == [python_first_nan_first_max(r) for r in x.tolist()]


def test_signed_zero_ties_take_the_first():
    x = torch.tensor([[-0.0, 0.0, -1.0], [0.0, -0.0, -INF], [-INF, -0.0, 0.0]])
    assert first_nan_first_max(x).tolist() == [0, 0, 1]
    value, _ = argmax_pair(x)
    assert f32_bits(value).tolist() == [0x80000000, 0, 0x80000000]


def split_and_reduce(rng: random.Random, x: torch.Tensor, in_order: bool):
    """Split each row into random blocks, argmax each block, combine in a random order."""
    width = x.shape[1]
    cuts = sorted(rng.sample(range(1, width), rng.randint(0, min(12, width - 1))))
    bounds = list(zip([0] + cuts, cuts + [width]))
    parts = []
    for lo, hi in bounds:
        ids = torch.arange(lo, hi).expand(x.shape[0], -1)
        parts.append(argmax_pair(x[:, lo:hi], ids))
    if in_order:
        # Seed's in-order combine: adjacent blocks, left one lower.
        while len(parts) > 1:
            merged = []
            for j in range(0, len(parts), 2):
                if j + 1 < len(parts):
                    (v1, i1), (v2, i2) = parts[j], parts[j + 1]
                    merged.append(combine_in_order(v1, i1, v2, i2))
                else:
                    merged.append(parts[j])
            parts = merged
        return parts[0]
    rng.shuffle(parts)
    values = torch.stack([p[0] for p in parts])
    ids = torch.stack([p[1] for p in parts])
    return reduce_pairs(values, ids, dim=0)


@pytest.mark.parametrize("in_order", [False, True])
def test_any_split_gives_the_same_pair(in_order):
    rng = random.Random(2 + in_order)
    for width in (1, 2, 7, 64, 129):
        x = random_rows(rng, 64, width)
        want_value, want_id = argmax_pair(x)
        for _ in range(8):
            value, idx = split_and_reduce(rng, x, in_order)
            assert idx.tolist() == want_id.tolist()
            assert f32_bits(value).tolist() == f32_bits(want_value).tolist()


def test_combine_is_a_total_order():
    rng = random.Random(4)
    raw = [(rng.choice(ALPHABET), i) for i in range(40)]  # unique ids, as in every real reduction
    v = torch.tensor([p[0] for p in raw], dtype=torch.float32)
    i = torch.tensor([p[1] for p in raw])
    n = len(raw)
    cv, ci = combine(v[:, None].expand(n, n), i[:, None].expand(n, n), v[None, :].expand(n, n), i[None, :].expand(n, n))
    wins = (ci == i[:, None]) & (f32_bits(cv) == f32_bits(v)[:, None])
    off = ~torch.eye(n, dtype=torch.bool)
    assert bool((wins ^ wins.T)[off].all())  # exactly one of each pair wins
    w = wins & off
    two_step = (w.int() @ w.int()) > 0
    assert bool((~two_step | w | ~off).all())  # transitive


def test_shards_and_ranks_by_global_id():
    rng = random.Random(5)
    x = random_rows(rng, 32, 96)
    want = first_nan_first_max(x)
    for tp in (2, 4, 8):
        shard = 96 // tp
        packets = [argmax_pair(x[:, k * shard:(k + 1) * shard], torch.arange(k * shard, (k + 1) * shard).expand(32, -1))
                   for k in range(tp)]
        order = list(range(tp))
        rng.shuffle(order)
        values = torch.stack([packets[k][0] for k in order])
        ids = torch.stack([packets[k][1] for k in order])
        assert reduce_pairs(values, ids, dim=0)[1].tolist() == want.tolist()


def test_combine_in_order_rejects_unordered_ids():
    with pytest.raises(ValueError, match="i1"):
        combine_in_order(torch.tensor([1.0]), torch.tensor([3]), torch.tensor([2.0]), torch.tensor([1]))
