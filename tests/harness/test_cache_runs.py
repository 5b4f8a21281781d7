"""The persistent reference cache across real runs: reuse, bypass, and the pool that fills it ahead of the ranks."""

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.families.catalog import discover
from harness.references.cache import kernel_cache_env
from kernels.artifact_cache import ARTIFACTS_VAR
from harness.launch.reference_pool import ReferencePool
from harness.references.pool import queue_items
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def validate(run_dir: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess:
    """``validate`` of the tiny scenario at world 2 on the cpu launcher, with its own cache directory."""
    cmd = [sys.executable, "-m", "harness", "validate", "--launcher", "cpu", "--scenario", "tiny", "--world", "2",
           "--scenario-root", str(SCENARIOS), "--run-dir", str(run_dir), "--no-store", *extra]
    env = dict(os.environ, RANKCHECK_CACHE_DIR=str(cache))
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=HANG_GUARD_S, env=env)


def reference_counts(run_dir: Path) -> list[dict]:
    """Each rank's reference counts (computed, loaded, discarded) of the tiny case at world 2."""
    paths = sorted((run_dir / "cases" / "markov_sharded.tiny" / "w2").glob("rank*.result.json"))
    return [json.loads(p.read_text())["references"] for p in paths]


def stored(directory: Path) -> list[Path]:
    """The reference files under ``directory``."""
    return sorted(directory.rglob("*.safetensors"))


def test_a_second_run_loads_every_reference_the_first_stored(tmp_path):
    cache = tmp_path / "cache"
    first = validate(tmp_path / "run1", cache)
    assert first.returncode == 0, first.stdout + first.stderr
    assert sum(c["computed"] for c in reference_counts(tmp_path / "run1")) == 2  # two calls, one rank each
    second = validate(tmp_path / "run2", cache)
    assert second.returncode == 0, second.stdout + second.stderr
    counts = reference_counts(tmp_path / "run2")
    assert [c["computed"] for c in counts] == [0, 0] and all(c["loaded"] for c in counts)


def test_no_cache_bypasses_the_persistent_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    proc = validate(tmp_path / "run", cache, "--no-cache")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not stored(cache) and stored(tmp_path / "run" / "refcache")  # the run's ranks still share theirs
    job = json.loads(next((tmp_path / "run" / "jobs").glob("job*.json")).read_text())
    assert job["cache_dir"] == str(tmp_path / "run" / "refcache")
    assert "off (--no-cache)" in proc.stdout
    run = tmp_path / "run"
    # kernels compiled afresh in this run, shared by its ranks only
    assert kernel_cache_env(None, run) == {"CUTE_DSL_DISABLE_FILE_CACHING": "1", ARTIFACTS_VAR: str(run / "kernels")}
    monkeypatch.delenv("CUTE_DSL_CACHE_DIR", raising=False)
    monkeypatch.delenv(ARTIFACTS_VAR, raising=False)
    assert kernel_cache_env(cache, run) == {"CUTE_DSL_CACHE_DIR": str(cache / "cute-dsl"),
                                            ARTIFACTS_VAR: str(cache / "kernels")}  # the cache's own directories
    monkeypatch.setenv("CUTE_DSL_CACHE_DIR", str(tmp_path / "chosen"))
    monkeypatch.setenv(ARTIFACTS_VAR, str(tmp_path / "chosen-kernels"))
    assert kernel_cache_env(cache, run) == {ARTIFACTS_VAR: str(tmp_path / "chosen-kernels")}  # the user's choice wins


def test_the_pool_computes_the_references_the_ranks_then_load(tmp_path):
    """The pool's keys are the ranks' keys: after the pool ran, the ranks compute nothing."""
    cache = tmp_path / "cache"
    (case,) = [c for c in discover(SCENARIOS) if c.name == "tiny"]
    pool = ReferencePool(tmp_path / "pool", cache / "references", queue_items([(2, [case])]), processes=1,
                         threads=1).start()
    try:
        assert pool.join(120), (tmp_path / "pool" / "logs" / "refpool0.log").read_text()
    finally:
        assert pool.stop() == []
    assert len(stored(cache)) == 2
    proc = validate(tmp_path / "run", cache, "--ref-workers", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    counts = reference_counts(tmp_path / "run")
    assert [c["computed"] for c in counts] == [0, 0] and all(c["loaded"] for c in counts)


def test_a_warm_cache_needs_no_pool_process_until_a_reference_goes(tmp_path):
    """What a past pool stored is skipped (no process started); a removed reference brings its item back."""
    cache = tmp_path / "cache" / "references"
    (case,) = [c for c in discover(SCENARIOS) if c.name == "tiny"]
    items = queue_items([(2, [case])])
    with ReferencePool(tmp_path / "first", cache, items, processes=1, threads=1) as first:
        assert first.processes == 1 and first.join(120)
    warm = ReferencePool(tmp_path / "second", cache, items, processes=1, threads=1)
    assert (warm.processes, warm.skipped) == (0, 1) and "1 item(s) already stored" in warm.describe()
    next(cache.rglob("*.safetensors")).unlink()
    assert ReferencePool(tmp_path / "third", cache, items, processes=1, threads=1).processes == 1


def test_the_ranks_mark_the_items_they_computed(tmp_path):
    """References the ranks computed (no pool) leave the item's marker: the next run starts no pool process."""
    cache = tmp_path / "cache"
    (case,) = [c for c in discover(SCENARIOS) if c.name == "tiny"]
    items = queue_items([(2, [case])])
    assert ReferencePool(tmp_path / "before", cache / "references", items, processes=1, threads=1).processes == 1
    proc = validate(tmp_path / "run", cache, "--ref-workers", "0")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = ReferencePool(tmp_path / "after", cache / "references", items, processes=1, threads=1)
    assert (after.processes, after.skipped) == (0, 1)


def test_an_item_waiting_for_another_process_comes_back_and_is_marked_later(tmp_path, monkeypatch):
    """While another process computes one of an item's references the item is re-queued, not marked."""
    from harness.references import pool as refpool

    queue, cache = tmp_path / "queue", tmp_path / "cache"
    refpool.write_queue(queue, [{"path": "x.yaml", "key": "f/x", "world": 2}])
    outcomes = iter([(0, 1, 1), (0, 2, 0)])  # first: one reference elsewhere; then every one present
    seen = []
    monkeypatch.setattr(refpool, "compute_item", lambda item, _cache: seen.append(dict(item)) or next(outcomes))
    monkeypatch.setattr(refpool, "REQUEUE_PAUSE_S", 0.0)
    assert refpool.drain(queue, cache) == 0
    assert [item.get("attempts", 0) for item in seen] == [0, 1]
    assert not list(queue.glob("*.json"))  # nothing left to take


def test_a_marker_is_written_only_when_every_reference_is_stored(tmp_path, monkeypatch):
    from harness.references import pool as refpool

    monkeypatch.setattr(refpool, "item_marker", lambda item, cache_dir: Path(cache_dir) / "items" / "m.json")
    key = "ab" + "0" * 38
    assert not refpool.mark_stored({}, [key], tmp_path)
    assert not (tmp_path / "items" / "m.json").exists()
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / f"{key}.safetensors").write_bytes(b"x")
    assert refpool.mark_stored({}, [key], tmp_path)
    assert json.loads((tmp_path / "items" / "m.json").read_text())["keys"] == [key]
