"""ReferenceCache: one computation per reference across ranks (threads here), stale claims, failures."""

import os
import subprocess
import sys
import threading
import time

import pytest
import torch

from harness.worker import ReferenceCache


def cache(tmp_path) -> ReferenceCache:
    """A cache over a tiny config and static tensor."""
    return ReferenceCache(tmp_path, "markov_sharded", "world", {"vocab": 8, "world": 2}, {"w": torch.ones(2)})


def test_computed_once_for_every_rank_and_world(tmp_path):
    calls = []

    def compute():
        calls.append(threading.get_ident())
        time.sleep(0.3)  # the other ranks arrive while it computes and must wait, not compute
        return {"tokens": torch.arange(4)}

    refs = [cache(tmp_path) for _ in range(4)]
    key = refs[0].key({"x": torch.zeros(3)}, {"rows": 1})
    beats = []
    out = [None] * 4

    def rank(r):
        out[r] = refs[r].get(key, compute, wait_s=30, heartbeat=lambda: beats.append(r))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(calls) == 1 and all(torch.equal(o["tokens"], torch.arange(4)) for o in out)
    other_world = ReferenceCache(tmp_path, "markov_sharded", "world", {"vocab": 8, "world": 4}, {"w": torch.ones(2)})
    assert other_world.key({"x": torch.zeros(3)}, {"rows": 1}) == key  # the TP size is not part of the key
    assert not list((tmp_path / "refcache").glob("*.claim"))


def test_stale_claim_is_taken_over_and_failure_drops_the_claim(tmp_path):
    refs = cache(tmp_path)
    key = refs.key({"x": torch.ones(1)}, {})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "refcache" / f"{key}.claim").write_text(dead.stdout.strip())
    started = time.monotonic()
    out = refs.get(key, lambda: {"y": torch.zeros(2)}, wait_s=30)
    assert time.monotonic() - started < 5 and torch.equal(out["y"], torch.zeros(2))

    key2 = refs.key({"x": torch.zeros(1)}, {})

    def broken():
        raise ValueError("call_inputs['temperature']: no reciprocal")

    with pytest.raises(ValueError, match="temperature"):
        refs.get(key2, broken, wait_s=30)
    assert not (tmp_path / "refcache" / f"{key2}.claim").exists()
    assert os.path.isdir(tmp_path / "refcache")


def test_waits_are_bounded(tmp_path):
    refs = cache(tmp_path)
    key = refs.key({}, {})
    (tmp_path / "refcache" / f"{key}.claim").write_text(str(os.getpid()))  # held by a live process
    started = time.monotonic()
    out = refs.get(key, lambda: {"y": torch.ones(1)}, wait_s=0.5)
    assert 0.5 <= time.monotonic() - started < 5 and torch.equal(out["y"], torch.ones(1))
