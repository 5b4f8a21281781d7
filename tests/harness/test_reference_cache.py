"""ReferenceCache: one computation per reference across ranks and runs, stale claims, failures, corruption, bounds."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import torch

from harness.references import cache as refcache
from harness.references.cache import ReferenceCache
from hang_guard import HANG_GUARD_S


def cache(tmp_path) -> ReferenceCache:
    """A cache over a tiny config and static tensor."""
    return ReferenceCache(tmp_path, "markov_sharded", "world", {"vocab": 8, "world": 2}, {"w": torch.ones(2)})


def claim_of(refs: ReferenceCache, key: str):
    """The claim file of ``key`` (its directory created, as a claimer would)."""
    path = refs.path(key).with_suffix(".claim")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def test_computed_once_for_every_rank_and_world(tmp_path, monkeypatch):
    monkeypatch.setattr(refcache, "HEARTBEAT_S", 0.01)  # a waiting rank says so at once
    calls, owner, waiting, lock = [], [], set(), threading.Condition()
    rank_of_thread: dict[int, int] = {}

    def others_waiting() -> bool:
        """Whether the three ranks that do not compute have each been seen waiting (beating while they wait)."""
        return bool(owner) and len(waiting - set(owner)) == 3

    def compute():
        """The one computation: it holds until the other ranks are waiting for it, so they must wait, not compute."""
        with lock:
            calls.append(threading.get_ident())
            owner.append(rank_of_thread[threading.get_ident()])
            assert lock.wait_for(others_waiting, timeout=60), (owner, waiting)
        return {"tokens": torch.arange(4)}

    def beat(r):
        """Rank ``r`` is waiting (or computing, for the owner)."""
        with lock:
            waiting.add(r)
            lock.notify_all()

    refs = [cache(tmp_path) for _ in range(4)]
    key = refs[0].key({"x": torch.zeros(3)}, {"rows": 1})
    out = [None] * 4

    def rank(r):
        rank_of_thread[threading.get_ident()] = r
        out[r] = refs[r].get(key, compute, wait_s=60, heartbeat=lambda: beat(r))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert others_waiting(), "every other rank waited for the one computation"
    assert len(calls) == 1 and all(torch.equal(o["tokens"], torch.arange(4)) for o in out)
    other_world = ReferenceCache(tmp_path, "markov_sharded", "world", {"vocab": 8, "world": 4}, {"w": torch.ones(2)})
    assert other_world.key({"x": torch.zeros(3)}, {"rows": 1}) == key  # the TP size is not part of the key
    assert not list(tmp_path.rglob("*.claim"))


def test_stale_claim_is_taken_over_and_failure_drops_the_claim(tmp_path, monkeypatch):
    refs = cache(tmp_path)
    key = refs.key({"x": torch.ones(1)}, {})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    claim_of(refs, key).write_text(f"{socket.gethostname()} {dead.stdout.strip()} 0")
    monkeypatch.setattr(refcache, "HEARTBEAT_S", 0.01)  # a rank that waits beats at once
    computing, waited = [], []
    out = refs.get(key, lambda: computing.append(1) or {"y": torch.zeros(2)}, wait_s=60,
                   heartbeat=lambda: None if computing else waited.append(1))
    assert torch.equal(out["y"], torch.zeros(2)) and refs.computed == 1
    assert waited == []  # the dead process's claim was taken over at once, not waited out

    key2 = refs.key({"x": torch.zeros(1)}, {})

    def broken():
        raise ValueError("call_inputs['temperature']: no reciprocal")

    with pytest.raises(ValueError, match="temperature"):
        refs.get(key2, broken, wait_s=30)
    assert not claim_of(refs, key2).exists()


def test_waits_are_bounded(tmp_path):
    refs = cache(tmp_path)
    key = refs.key({}, {})
    claim_of(refs, key).write_text(f"{socket.gethostname()} {os.getpid()} 0")  # held by a live process
    started = time.monotonic()
    out = refs.get(key, lambda: {"y": torch.ones(1)}, wait_s=0.5)
    assert time.monotonic() - started >= 0.5  # it waited for the live owner, up to its deadline
    assert refs.computed == 1 and torch.equal(out["y"], torch.ones(1))  # then computed it here
    assert claim_of(refs, key).exists()  # and left the live owner's claim alone


RANK_SCRIPT = """
import sys, time, torch
from harness.references.cache import ReferenceCache
refs = ReferenceCache(sys.argv[1], "markov_sharded", "world", {"vocab": 8, "world": 2}, {"w": torch.ones(2)})
key = refs.key({"x": torch.zeros(3)}, {"rows": 1})
def compute():
    time.sleep(1.0)  # the other processes arrive while this one computes
    return {"tokens": torch.arange(5)}
out = refs.get(key, compute, wait_s=60)
assert torch.equal(out["tokens"], torch.arange(5))
print("computed" if refs.computed else "loaded")
"""


def test_shared_by_concurrent_rank_processes(tmp_path):
    """Four processes (ranks of a job, or of several nodes' jobs) on one directory: one computes, three load."""
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
             for _ in range(4)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=HANG_GUARD_S)[0].strip())
        finally:
            p.kill()
    assert all(p.returncode == 0 for p in procs), outs
    assert sorted(outs) == ["computed", "loaded", "loaded", "loaded"]


def test_a_later_run_loads_what_an_earlier_run_stored(tmp_path):
    first, second = cache(tmp_path), cache(tmp_path)
    key = first.key({"x": torch.ones(2)}, {"rows": 2})
    first.get(key, lambda: {"y": torch.full((3,), 7.0)})
    out = second.get(key, lambda: pytest.fail("recomputed a stored reference"))
    assert (second.computed, second.loaded) == (0, 1) and torch.equal(out["y"], torch.full((3,), 7.0))


def test_corrupt_entry_is_discarded_and_recomputed(tmp_path):
    refs = cache(tmp_path)
    key = refs.key({"x": torch.ones(2)}, {})
    refs.get(key, lambda: {"y": torch.arange(6, dtype=torch.float32)})
    path = refs.path(key)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x40  # one flipped bit in the last tensor byte: the file still loads, its digest does not match
    path.write_bytes(bytes(raw))
    again = cache(tmp_path)
    out = again.get(key, lambda: {"y": torch.arange(6, dtype=torch.float32)})
    assert (again.discarded, again.computed, again.loaded) == (1, 1, 0)
    assert torch.equal(out["y"], torch.arange(6, dtype=torch.float32))
    path.write_bytes(b"not a safetensors file")
    third = cache(tmp_path)
    third.get(key, lambda: {"y": torch.zeros(1)})
    assert (third.discarded, third.computed) == (1, 1)


def test_key_follows_the_golden_code(tmp_path, monkeypatch):
    before = cache(tmp_path).key({"x": torch.ones(1)}, {})
    monkeypatch.setattr(refcache, "code_digest", lambda: "another golden")
    assert cache(tmp_path).key({"x": torch.ones(1)}, {}) != before


def test_size_is_bounded_least_recently_used_first(tmp_path):
    refs = ReferenceCache(tmp_path, "markov_sharded", "world", {"vocab": 8}, {}, max_bytes=10_000)
    keys = [refs.key({"i": torch.tensor([i])}, {}) for i in range(4)]
    for i, key in enumerate(keys):
        refs.get(key, lambda: {"y": torch.zeros(1000)})  # 4 kB each
        os.utime(refs.path(key), (1000 + i, 1000 + i))
    assert [refs.has(k) for k in keys] == [False, False, True, True]


def test_another_hosts_claim_is_trusted_until_stale(tmp_path, monkeypatch):
    refs = cache(tmp_path)
    key = refs.key({"x": torch.ones(3)}, {})
    claim = claim_of(refs, key)
    claim.write_text("some-other-host 1 1")
    assert not refcache.claim_dead(claim)
    old = time.time() - refcache.CLAIM_STALE_S - 1
    os.utime(claim, (old, old))
    assert refcache.claim_dead(claim)


def test_ranks_of_one_process_share_a_reference_until_its_file_changes(tmp_path):
    def shared() -> ReferenceCache:
        """A cache whose references this process's other shared caches see."""
        return ReferenceCache(tmp_path, "markov_sharded", "world", {"vocab": 8, "world": 2}, {"w": torch.ones(2)},
                              shared_in_process=True)

    first, second = shared(), shared()
    key = first.key({"x": torch.full((2,), 3.0)}, {})
    made = first.get(key, lambda: {"y": torch.arange(5)})
    assert second.get(key, lambda: pytest.fail("recomputed")) is made  # handed over, not read again
    assert (second.loaded, second.computed) == (1, 0)
    assert cache(tmp_path).get(key, lambda: pytest.fail("recomputed")) is not made  # an unshared cache reads the file
    first.path(key).write_bytes(b"rewritten")  # another size: the process's copy no longer stands for the file
    third = shared()
    again = third.get(key, lambda: {"y": torch.arange(5)})
    assert (third.discarded, third.computed) == (1, 1) and again is not made
