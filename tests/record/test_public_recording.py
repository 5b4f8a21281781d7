"""CPU tests of ``rankcheck.recording`` around the public kernel objects (their golden stand-ins, ``golden.public``):
each class recorded at world 2 over ``ThreadWorld`` (every method called) and replayed by ``harness replay --bundle
--impl golden`` with identical bits; a planted desync (rank 1 passes the sampler other rows) named by rank, call,
object and flight launch; a recording ended by SIGTERM mid-loop (a real process) replayed up to its last call; a
hand-edited manifest and the older formats refused with exit 2.

The stand-ins are driven as ``tests/golden/test_stand_ins.py`` drives them (the harness's kernel adapters' way),
with the calls of CPU scenarios."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import rankcheck
from golden.comm import run_ranks
from harness.cli import main as cli_main
from harness.recording.replay import replay_one
from harness.recording.targets import PUBLIC_CLASSES
from harness.recording.world import load_world

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "golden"))
sys.path.insert(0, str(HERE))

import test_stand_ins as drivers  # noqa: E402
from public_recording_child import sampler_job  # noqa: E402

WORLD = 2
pytestmark = pytest.mark.usefixtures("one_intra_op_thread")  # tests/conftest.py: one intra-op thread per rank


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


def test_a_call_under_graph_capture_is_marked_not_copied_and_not_replayed(tmp_path, capsys, monkeypatch):
    """The recorder sees capture through ``stream_capturing`` (no CUDA here: the test says when it captures)."""
    from harness.recording import recorder

    capturing = iter([False, True])  # call 0 eager, call 1 under capture
    monkeypatch.setattr(recorder, "stream_capturing", lambda: next(capturing))
    run_ranks(1, sampler_job(tmp_path, [0, 1], 1), timeout_s=60)
    rank = load_world(tmp_path).ranks[0]
    eager, captured = rank.bundle.calls
    assert not eager["captured"] and captured["captured"] and captured["outputs"] == []
    assert rank.bundle.inputs(0) and not rank.bundle.inputs(1), "nothing is copied under capture"
    assert rank.describe(1)["argument base_logits shape"] == [8, 4, 4096], "a captured call is still described"
    code, out = _replay(tmp_path, capsys)
    assert code == 0, out
    assert "sampler: calls from 1 on not replayed (call 1 was captured into a CUDA graph" in out, out
    assert "1 calls completed over 1 ranks" in out, out


def layers_and_sampler_job(directory: Path, skip: tuple[int, int] | None = None):
    """A rank's job: two ``AllReduceMHC`` layers and a sampler in one recording, three decode steps in the order
    layer0, layer1, sampler; ``skip`` = (rank, step): that rank leaves out that step's sampler call."""
    ar_static, ar_config, ar_calls = drivers.scenario_calls("allreduce_mhc", "basic_ll", WORLD)
    sm_static, sm_config, sm_calls = drivers.scenario_calls("markov_sharded", "basic", WORLD)

    def job(comm):
        objects = {"layer0": drivers.allreduce_stand_in(ar_config, comm),
                   "layer1": drivers.allreduce_stand_in(ar_config, comm),
                   "sampler": drivers.sharded_stand_in(sm_static, sm_config, comm)}
        with rankcheck.recording(objects, directory) as recorded:
            for step in range(3):
                for layer in ("layer0", "layer1"):
                    drivers.allreduce_public_call(recorded[layer], ar_config, ar_static, *ar_calls[step], comm.rank)
                if (comm.rank, step) != skip:
                    drivers.sharded_public_call(recorded["sampler"], *sm_calls[step], local=False, rank=comm.rank)

    return job


def test_several_objects_of_one_job_replay_and_a_skipped_call_is_named(tmp_path, capsys):
    run_ranks(WORLD, layers_and_sampler_job(tmp_path / "ok"), timeout_s=120)
    assert [o["name"] for o in load_world(tmp_path / "ok").objects] == ["layer0", "layer1", "sampler"]
    code, out = _replay(tmp_path / "ok", capsys, "--deadline", "60")
    assert code == 0 and "18 calls completed over 2 ranks" in out, out

    try:  # the ranks meet in a mismatched exchange (rank 1's layer0 against rank 0's sampler)
        run_ranks(WORLD, layers_and_sampler_job(tmp_path / "skip", skip=(1, 1)), timeout_s=20)
    except RuntimeError:
        pass
    code, out = _replay(tmp_path / "skip", capsys, "--deadline", "10")
    assert code == 1, out
    assert "DIVERGENCE: rank 1 deviates at call 5: rank 0 made (sampler.__call__, flight launch 1), rank 1 " \
           "(layer0.__call__, flight launch 4)" in out, out
    report = replay_one(tmp_path / "skip", "golden", 10)
    assert report["first"] == {"rank": 1, "call": 5, "object": "sampler", "method": "__call__", "launch": 1,
                               "what": report["first"]["what"]}, report["first"]


def test_a_rank_that_skipped_its_last_call_is_named_before_the_peer_left_waiting(tmp_path, capsys):
    """Rank 1 leaves out the sampler's call 2; rank 0 waits in it until the world's deadline (in flight)."""
    try:
        run_ranks(WORLD, sampler_job(tmp_path, [0, 1, 2], WORLD, planted={1: [0, 1]}), timeout_s=5)
    except RuntimeError:
        pass
    code, out = _replay(tmp_path, capsys, "--deadline", "5")
    assert code == 1, out
    assert "first divergence: rank 1 made 2 calls where rank 0 made 3: it stopped before rank 0's call 2 " \
           "(sampler.__call__, flight launch 2)" in out, out
    assert "DIVERGENCE: rank 0 stopped in call 2 (sampler.__call__, flight launch 2): the call never returned" in out
