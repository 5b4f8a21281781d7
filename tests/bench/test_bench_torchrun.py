"""The torchrun bench mode without a GPU: real torchrun processes, ranks that say why, verdicts, listing."""

from __future__ import annotations

import os
import subprocess
import sys

from harness.bench.registry import REGISTRY, discover
from harness.bench.torchrun import run_case, spawn_env, verdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = "allreduce_mhc/torchrun_tp2_h5120_m1"


def _case(key: str = KEY):
    """The registered torchrun case ``key``."""
    discover()
    family, name = key.split("/")
    (case,) = REGISTRY.cases(family=family, name=name)
    return case


def test_torchrun_cases_are_listed_and_not_default():
    discover()
    spawned = [c for c in REGISTRY.cases() if c.launcher == "torchrun"]
    assert {c.key for c in spawned} >= {KEY, "markov_sharded/torchrun_r8_s8_v129280_w2"}
    assert all(not c.default for c in spawned)
    # Each case runs as many processes as it has ranks: the all-reduce at tp 2 and 4, the sampler at 2.
    assert all(c.world == c.params.get("tp", 2) for c in spawned)
    assert {c.world for c in spawned} == {2, 4}


def test_ranks_without_gpu_report_not_available(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    out = run_case(_case(), warmup=0, reps=1, deadline_s=120, gpus=0)
    assert not out.failed and not out.entries
    assert out.unavailable and "no GPU" in out.unavailable[0]["why"] and not out.unavailable[0]["optional"]


def test_bench_exit_is_not_green_when_nothing_ran():
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": ROOT}
    argv = [sys.executable, "-m", "harness", "bench", "--case", KEY, "--out", "/nonexistent-never-written"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not available: no GPU" in done.stdout and "nothing written" in done.stderr
    allowed = subprocess.run(argv + ["--allow-unavailable"], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=180)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr


def test_verdicts():
    measured = {"status": "measured", "entries": [{"name": "x"}], "device": {}, "machine": {},
                "unavailable": [{"name": "peer", "optional": True, "why": "no"}]}
    ok = verdict(KEY, {0: measured, 1: {"status": "measured"}}, 2, rc=0, timed_out=False, deadline_s=1)
    assert ok.entries == [{"name": "x"}] and not ok.failed and ok.unavailable[0]["optional"]
    late = verdict(KEY, {}, 2, rc=None, timed_out=True, deadline_s=5)
    assert "no result within 5 s" in late.failed[0]["error"]
    lost = verdict(KEY, {0: measured}, 2, rc=1, timed_out=False, deadline_s=1)
    assert "rank 1 wrote no result" in lost.failed[0]["error"]
    broken = verdict(KEY, {0: measured, 1: {"status": "failed", "error": "E"}}, 2, rc=1, timed_out=False, deadline_s=1)
    assert broken.failed[0]["error"] == "rank 1: E"


def test_spawn_env_keeps_multicast_off_and_picks_the_backend():
    shared, own = spawn_env(2, gpus=1), spawn_env(2, gpus=2)
    for env in (shared, own):
        assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert shared["RANKCHECK_BENCH_BACKEND"] == "gloo" and shared["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] == "1"
    assert own["RANKCHECK_BENCH_BACKEND"] == "nccl"


def test_flashinfer_contract_and_honest_exit():
    from harness.families.allreduce_mhc import flashinfer_mxfp8 as fi

    report = fi.contract_report()
    assert report["scale_byte_differences"] == 0 and report["bf16_amax_checked"] == 0x7F7F
    assert report["differing_blocks_scale_bytes"] == [0]
    if fi.kernel_unavailable() is not None:
        assert fi.main([]) == 2 and fi.main(["--optional"]) == 0
