"""CPU tests of ``rankcheck.recording`` around the public kernel objects (their golden stand-ins, ``golden.public``):
each class recorded at world 2 over ``ThreadWorld`` (every method called) and replayed by ``harness replay --bundle
--impl golden`` with identical bits; a planted desync (rank 1 passes the sampler other rows) named by rank, call,
object and flight launch; a recording ended by SIGTERM mid-loop (a real process) replayed up to its last call; a
hand-edited manifest and the older formats refused with exit 2.

The stand-ins are driven as ``tests/golden/test_public_api.py`` drives them (the harness's kernel adapters' way),
with the calls of CPU scenarios."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import rankcheck
from golden.comm import run_ranks
from harness.cli import main as cli_main
from harness.recording.targets import PUBLIC_CLASSES
from harness.recording.world import load_world

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "golden"))
sys.path.insert(0, str(HERE))

import test_public_api as drivers  # noqa: E402
from public_recording_child import sampler_job  # noqa: E402

WORLD = 2


@pytest.fixture(autouse=True)
def one_intra_op_thread():
    """Small tensors on a shared CPU: one intra-op thread per rank (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _replay(directory: Path, capsys, *extra: str) -> tuple[int, str]:
    """``python -m harness replay --bundle DIR --impl golden``: (exit code, printed output)."""
    code = cli_main(["replay", "--bundle", str(directory), "--impl", "golden", *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def allreduce_job(directory: Path):
    """A rank's job: an ``AllReduceMHC`` stand-in recorded over finalize's call 0 (``finalize``) and call 4 (``__call__``)."""
    static, config, calls = drivers.scenario_calls("allreduce_mhc", "finalize", WORLD)

    def job(comm):
        layer = drivers.allreduce_stand_in(config, comm)
        with rankcheck.recording({"layer": layer}, directory) as recorded:
            for inputs, params in (calls[0], calls[4]):
                drivers.allreduce_public_call(recorded["layer"], config, static, inputs, params, comm.rank)
        return layer.flight_launches

    return job


def fused_job(directory: Path):
    """A rank's job: a ``MarkovKernels`` stand-in recorded over one draft call (anchor, steps, gathers, picks, fill)."""
    static, config, calls = drivers.scenario_calls("markov_fused", "basic", WORLD)

    def job(comm):
        kernels = drivers.fused_stand_in(static, config, comm)
        with rankcheck.recording(kernels, directory) as recorded:
            drivers.fused_public_loop(recorded, static, config, calls[0][0], comm.rank)
        return kernels.flight_launches

    return job


JOBS = {"AllReduceMHC": allreduce_job, "MarkovKernels": fused_job,
        "ShardedMarkovSampler": lambda directory: sampler_job(directory, [0, 1, 2], WORLD)}


@pytest.mark.parametrize("cls", sorted(JOBS))
def test_each_public_class_replays_with_identical_bits(cls, tmp_path, capsys):
    launches = run_ranks(WORLD, JOBS[cls](tmp_path), timeout_s=120)
    world = load_world(tmp_path)
    assert [o["class"] for o in world.objects] == [cls]
    recorded = world.ranks[1].bundle.calls
    assert {c["method"] for c in recorded} == set(PUBLIC_CLASSES[cls].methods), "every method recorded"
    assert recorded[-1]["flight"][1] == launches[1], "the flight launches after the last call are the object's"
    code, out = _replay(tmp_path, capsys, "--deadline", "60")
    assert code == 0, out
    assert f"{2 * len(recorded)} calls completed over 2 ranks, " in out and "verdict: ok" in out, out
    assert not re.search(r"ranks, 0 elements", out), out


def test_a_planted_desync_names_rank_call_object_and_launch(tmp_path, capsys):
    """Rank 1 passes the sampler's call 0 again at call 1 (1 row where rank 0 passes 8)."""
    try:  # the stand-ins exchange fixed-size shards: the live world may pair the calls without an error
        run_ranks(WORLD, sampler_job(tmp_path, [0, 1, 2], WORLD, planted={1: [0, 0, 2]}), timeout_s=20)
    except RuntimeError:
        pass
    code, out = _replay(tmp_path, capsys, "--deadline", "10")
    assert code == 1, out
    assert ("DIVERGENCE: rank 1 deviates at call 1 (sampler.__call__, flight launch 1): argument base_logits shape: "
            "rank 1 [1, 4, 4096], rank 0 [8, 4, 4096]") in out, out
    assert "rank 1 passed call 0's arguments again at call 1" in out, out
    assert "first divergence: rank 1 deviates at call 1 (sampler.__call__, flight launch 1)" in out, out


def test_a_recording_ended_by_sigterm_replays_up_to_its_last_call(tmp_path, capsys):
    child = subprocess.Popen([sys.executable, str(HERE / "public_recording_child.py"), str(tmp_path), "2"], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                 [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])})
    try:
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=120) == -signal.SIGTERM, "the signal ends the process"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    entry = load_world(tmp_path).ranks[0].entry
    assert entry["ended"] == "signal SIGTERM" and entry["calls"] == [0, 1] and not entry["in_flight"]
    code, out = _replay(tmp_path, capsys)
    assert code == 1 and "RANK ENDED: rank 0: signal SIGTERM" in out, out  # interrupted: never a pass
    assert "2 calls completed over 1 ranks" in out and "MISMATCH" not in out and "REPLAY FAILED" not in out, out


def _recorded_sampler(directory: Path) -> Path:
    """A one-rank sampler recording of two calls in ``directory``."""
    run_ranks(1, sampler_job(directory, [0, 1], 1), timeout_s=60)
    return directory


def test_an_edited_manifest_and_older_formats_are_refused(tmp_path, capsys):
    recording = _recorded_sampler(tmp_path / "rec")
    manifest_path = recording / load_world(recording).ranks[0].entry["bundle"] / "manifest.yaml"
    manifest = yaml.safe_load(manifest_path.read_text())
    manifest["calls"][1]["object"] = "someone_else"
    manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    code, out = _replay(recording, capsys)
    assert code == 2 and "calls[1].object: expected one of ['sampler']" in out, out

    world_yaml = recording / "world.yaml"
    world_yaml.write_text(world_yaml.read_text().replace("format: 2", "format: 1"))
    code, out = _replay(recording, capsys)
    assert code == 2 and "format 1, written by an older rankcheck" in out and "record the job again" in out, out

    single = tmp_path / "single"
    single.mkdir()
    (single / "manifest.yaml").write_text("format: 1\n")
    code, out = _replay(single, capsys)
    assert code == 2 and "an older `harness record capture`" in out, out
