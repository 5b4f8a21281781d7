"""Reference cache entries an attacker or an accident can plant: swapped, forged, truncated, stale key code, reused PIDs.

Each test plants the bad state in its own temporary cache directory and
checks that the entry is discarded and recomputed (never used), or that the
key moves with the code a reference imports.
"""

import os
import shutil
import socket

import torch
from safetensors.torch import save_file

from harness.references import cache as refcache
from harness.references.cache import DIGEST_KEY, ReferenceCache, tree_digest
from harness.references.code_key import reference_sources
from harness.wire.processes import process_start_time

REPO = refcache.REPO_ROOT


def cache(tmp_path) -> ReferenceCache:
    """A cache over a tiny config and static tensor."""
    return ReferenceCache(tmp_path, "markov_sharded", "world", {"vocab": 8, "world": 2}, {"w": torch.ones(2)})


def test_swapped_entries_are_discarded_and_recomputed(tmp_path):
    refs = cache(tmp_path)
    key_a, key_b = refs.key({"x": torch.ones(2)}, {}), refs.key({"x": torch.zeros(2)}, {})
    refs.get(key_a, lambda: {"y": torch.full((3,), 1.0)})
    refs.get(key_b, lambda: {"y": torch.full((3,), 2.0)})
    path_a, path_b = refs.path(key_a), refs.path(key_b)
    bytes_a, bytes_b = path_a.read_bytes(), path_b.read_bytes()
    path_a.write_bytes(bytes_b)
    path_b.write_bytes(bytes_a)
    again = cache(tmp_path)
    out_a = again.get(key_a, lambda: {"y": torch.full((3,), 1.0)})
    out_b = again.get(key_b, lambda: {"y": torch.full((3,), 2.0)})
    assert torch.equal(out_a["y"], torch.full((3,), 1.0)) and torch.equal(out_b["y"], torch.full((3,), 2.0))
    assert (again.discarded, again.computed, again.loaded) == (2, 2, 0)
    assert key_b in again.discarded_why[0] and "not" in again.discarded_why[0]


def test_forged_entry_with_a_recomputed_digest_is_discarded(tmp_path):
    refs = cache(tmp_path)
    key = refs.key({"x": torch.ones(2)}, {})
    forged = {"y": torch.full((3,), 9.0)}  # a planted bug's output, its digest recomputed the way the file used to carry it
    refs.path(key).parent.mkdir(parents=True, exist_ok=True)
    save_file(forged, str(refs.path(key)), metadata={DIGEST_KEY: refcache.payload_digest(forged)})
    out = refs.get(key, lambda: {"y": torch.full((3,), 1.0)})
    assert torch.equal(out["y"], torch.full((3,), 1.0)) and (refs.discarded, refs.computed) == (1, 1)


def test_truncated_entry_is_discarded_and_recomputed(tmp_path):
    refs = cache(tmp_path)
    key = refs.key({"x": torch.ones(2)}, {})
    refs.get(key, lambda: {"y": torch.arange(64, dtype=torch.float32)})
    path = refs.path(key)
    path.write_bytes(path.read_bytes()[:-17])
    again = cache(tmp_path)
    out = again.get(key, lambda: {"y": torch.arange(64, dtype=torch.float32)})
    assert torch.equal(out["y"], torch.arange(64, dtype=torch.float32)) and (again.discarded, again.computed) == (1, 1)
    assert "does not load" in again.discarded_why[0]


def copy_reference_tree(dest):
    """The packages a reference's imports reach, copied under ``dest`` (a tree ``tree_digest`` can read)."""
    for package in ("contracts", "golden", "harness", "kernels"):
        shutil.copytree(REPO / package, dest / package, ignore=shutil.ignore_patterns("__pycache__"))


def test_the_key_covers_contracts_found_from_the_imports(tmp_path):
    copy_reference_tree(tmp_path)
    covered = {p.relative_to(tmp_path).as_posix() for p in reference_sources(("golden.markov_sharded",), tmp_path)}
    assert {"contracts/markov_sharded.py", "golden/markov_sharded/__init__.py", "golden/comm.py"} <= covered
    before = tree_digest(tmp_path)
    unrelated = tmp_path / "harness" / "launch" / "jobs.py"
    unrelated.write_text(unrelated.read_text() + "\n# not imported by a reference\n")
    assert tree_digest(tmp_path) == before
    contract = tmp_path / "contracts" / "markov_sharded.py"
    contract.write_text(contract.read_text() + "\nLAUNCH_TAG_EDITED = 1\n")
    assert tree_digest(tmp_path) != before


def test_a_claim_whose_pid_was_reused_is_taken_over_at_once(tmp_path):
    refs = cache(tmp_path)
    key = refs.key({"x": torch.ones(3)}, {})
    claim = refs.path(key).with_suffix(".claim")
    claim.parent.mkdir(parents=True, exist_ok=True)
    # this process's PID with another start time: the owner that wrote it is gone, its PID now someone else's
    claim.write_text(f"{socket.gethostname()} {os.getpid()} {process_start_time(os.getpid()) + 1}")
    assert refcache.claim_dead(claim)
    out = refs.get(key, lambda: {"y": torch.ones(1)}, wait_s=600)
    # taken over (and dropped after storing), not waited out: a waited-out claim is left in place
    assert torch.equal(out["y"], torch.ones(1)) and not claim.exists()


def test_a_live_owners_claim_holds(tmp_path):
    refs = cache(tmp_path)
    claim = refs.path(refs.key({}, {})).with_suffix(".claim")
    claim.parent.mkdir(parents=True, exist_ok=True)
    claim.write_text(f"{socket.gethostname()} {os.getpid()} {process_start_time(os.getpid())}")
    assert not refcache.claim_dead(claim)
