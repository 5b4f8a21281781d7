"""CPU tests of ``rankcheck.recording`` and ``replay --bundle``: the bounded window, the recording written on
an exception and on SIGTERM, written through as calls happen (a rank killed by SIGKILL inside a call keeps its
completed calls and the inputs of the one it was in), a window resumed mid-stream replaying with identical bits, a tampered
recording refused, and a recorded disagreement (two ranks that passed different rows) named by rank,
launch and field."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

import rankcheck
from harness.cli import main as cli_main
from harness.recording.recorder import RecordedObject, Recorder
from harness.recording.values import decode_plain
from harness.recording.world import load_world

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from recording_child import child_system, sharded_system  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")  # tests/conftest.py


class _Counter:
    """A toy system: ``y = x + calls``; its state counts the calls."""

    def __init__(self) -> None:
        self.calls = 0

    def launch(self, call_inputs, call_params):
        self.calls += 1
        return {"y": call_inputs["x"] + self.calls}

    def state(self):
        return {"calls": self.calls}


def _counted(**bounds) -> tuple[Recorder, RecordedObject]:
    """A recorder and the proxy of a ``_Counter`` whose ``launch`` it records."""
    recorder = Recorder(**bounds)
    return recorder, RecordedObject(_Counter(), "system", recorder, ("launch",))


def test_window_keeps_the_newest_calls_by_count_and_by_bytes():
    recorder, proxy = _counted(max_calls=3)
    for i in range(5):
        proxy.launch({"x": torch.full((4,), i)}, {})
    assert [c.index for c in recorder.calls] == [2, 3, 4] and recorder.calls_made == 5
    assert [int(c.inputs["call_inputs.x"][0]) for c in recorder.calls] == [2, 3, 4]
    assert recorder.calls[0].state_before == {"calls": 2}, "the state just before the oldest kept call"
    per_call = 4 * 8 + 4 * 8 + 8  # x, y (int64) and the state.calls counter
    by_bytes, proxy = _counted(max_bytes=2 * per_call)
    for i in range(5):
        proxy.launch({"x": torch.full((4,), i)}, {})
    assert [c.index for c in by_bytes.calls] == [3, 4]
    with pytest.raises(ValueError, match="max_calls"):
        Recorder(max_calls=0)


def _replay(directory: Path, capsys, *extra: str) -> tuple[int, str]:
    """``python -m harness replay --bundle DIR --impl golden``: (exit code, printed output)."""
    code = cli_main(["replay", "--bundle", str(directory), "--impl", "golden", *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_written_on_an_exception_with_the_call_in_flight(tmp_path, capsys):
    system, static, config, calls = sharded_system()
    bad_inputs = dict(calls[1][0])
    bad_inputs["input_ids"] = bad_inputs["input_ids"][:0]  # refused by the system: the call raises in flight
    with pytest.raises((ValueError, TypeError)):
        with rankcheck.recording(system, tmp_path, family="markov_sharded", config=config, static=static,
                                 rank=0, world=1) as recorder:
            recorder.launch(*calls[0])
            recorder.launch(bad_inputs, calls[1][1])
    world = load_world(tmp_path)
    entry = world.ranks[0].entry
    assert entry["calls"] == [0, 1] and entry["in_flight"] and entry["ended"].startswith("exception: ")
    assert world.objects[0]["family"] == "markov_sharded" and "torch" in world.manifest["versions"]
    assert "world" not in world.ranks[0].bundle.objects[0]["config"], "the TP size travels as the world"
    code, out = _replay(tmp_path, capsys)
    assert code == 1, out
    assert "REPLAY FAILED: rank 0 at call 1 (system.launch)" in out


def test_a_window_started_mid_stream_replays_identical_bits(tmp_path, capsys):
    system, static, config, calls = sharded_system()
    with rankcheck.recording(system, tmp_path, family="markov_sharded", config=config, static=static,
                             max_calls=2, rank=0, world=1) as recorder:
        for call in calls + calls:
            recorder.launch(*call)
    entry = load_world(tmp_path).ranks[0].entry
    assert entry["calls"] == [4, 5] and entry["ended"] == "exit"
    assert load_world(tmp_path).ranks[0].call(4)["state_before"] == {"launches": 4}
    code, out = _replay(tmp_path, capsys)
    assert code == 0, out
    assert "replayed from call 4" in out and "verdict: ok" in out


def test_a_tampered_recording_is_refused(tmp_path, capsys):
    system, static, config, calls = sharded_system()
    with rankcheck.recording(system, tmp_path, family="markov_sharded", config=config, static=static,
                             rank=0, world=1) as recorder:
        recorder.launch(*calls[0])
    payload = tmp_path / load_world(tmp_path).ranks[0].entry["bundle"] / "tensors.safetensors"
    raw = bytearray(payload.read_bytes())
    raw[-3] ^= 0x40
    payload.write_bytes(bytes(raw))
    code, out = _replay(tmp_path, capsys)
    assert code == 2 and "sha256 differs" in out, out


def _signal_child(directory: Path, signum: int, *args: str) -> None:
    """Run recording_child.py with ``args``, send ``signum`` once it is ready, check it died by that signal."""
    child = subprocess.Popen([sys.executable, str(HERE / "recording_child.py"), str(directory), *args], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])})
    try:
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signum)
        assert child.wait(timeout=60) == -signum, "the signal ends the process"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)


def test_written_on_sigterm(tmp_path, capsys):
    _signal_child(tmp_path, signal.SIGTERM, "2")
    entry = load_world(tmp_path).ranks[0].entry
    assert entry["ended"] == "signal SIGTERM" and entry["calls"] == [0, 1]
    code, out = _replay(tmp_path, capsys)
    # the two calls replay clean; the job did not end by itself, which the replay says and does not call a pass
    assert code == 1 and "RANK ENDED: rank 0: signal SIGTERM" in out, out
    assert "MISMATCH" not in out and "REPLAY FAILED" not in out, out


def test_a_recording_without_calls_is_never_a_pass(tmp_path, capsys):
    """A job that failed before its first call (as a GPU run did: the sampler's constructor raised) replays nothing."""
    from harness.recording.replay import run_bundle_replay

    _signal_child(tmp_path, signal.SIGTERM, "0")
    code = run_bundle_replay(str(tmp_path), impl="golden")
    out = capsys.readouterr().out
    assert code == 1 and "NOTHING RECORDED" in out, out


def test_a_rank_killed_inside_a_call_keeps_what_it_did(tmp_path, capsys):
    """SIGKILL while the child sleeps in its third call: no handler runs, yet the recording is on disk."""
    _signal_child(tmp_path, signal.SIGKILL, "2", "in-call")
    rank = load_world(tmp_path).ranks[0]
    assert rank.entry["ended"] == "running" and rank.entry["calls"] == [0, 1, 2] and rank.entry["in_flight"]
    assert rank.ended.startswith("killed or crashed: last write at call 2"), rank.ended
    _, _, _, calls = child_system()
    for index in (0, 1, 2):
        inputs = rank.bundle.inputs(rank.position(index))
        assert decode_plain(rank.call(index)["arguments"]["call_params"]) == calls[index][1]
        assert all(torch.equal(inputs[f"call_inputs.{k}"], v) for k, v in calls[index][0].items()), \
            f"call {index}'s inputs"
    assert rank.bundle.outputs(0) and rank.bundle.outputs(1), "the completed calls' outputs"
    assert not rank.bundle.outputs(2), "call 2 never returned"
    assert {p.name for p in tmp_path.iterdir() if p.name.startswith(("rank0", ".rank0"))} == \
        {"rank0.yaml", rank.entry["bundle"]}, "older versions were removed"
    code, out = _replay(tmp_path, capsys)
    assert code == 1, out  # the in-flight call completes in the replay: a finding, with how the rank ended
    assert "killed or crashed: last write at call 2" in out
    assert "MISMATCH" not in out and "REPLAY FAILED" not in out, out


def test_a_recorded_disagreement_names_rank_launch_and_field(tmp_path, capsys):
    """Two ranks recorded in-process, rank 1 passing call 0's batch again at launch 1: named by rank, launch, rows."""
    from golden.comm import run_ranks
    from harness.families import adapter, catalog

    [case] = catalog.select(catalog.discover(), family="markov_sharded", names=["basic"])
    scenario = catalog.load(case.path)
    static, config, launches = catalog.plan(scenario, 2, 0)

    def rank_body(comm):
        """Record this rank's three calls; rank 1 repeats call 0 at launch 1."""
        system = adapter("markov_sharded").make_system("golden", comm, static, config)
        order = [0, 0, 2] if comm.rank == 1 else [0, 1, 2]
        with rankcheck.recording(system, tmp_path, family="markov_sharded", config=config, static=static,
                                 rank=comm.rank, world=2) as recorder:
            for index in order:
                recorder.launch(launches[index].call_inputs, launches[index].call_params)

    try:  # the golden sampler exchanges fixed-size shards: the live world may pair the calls silently
        run_ranks(2, rank_body, timeout_s=20)
    except RuntimeError:
        pass
    code, out = _replay(tmp_path, capsys, "--deadline", "10")
    assert code == 1, out
    assert "DIVERGENCE: rank 1 deviates at call 1 (system.launch): rows: rank 1 1, rank 0 8" in out, out
    assert "rank 1 passed call 0's arguments again at call 1" in out
    assert yaml.safe_load((tmp_path / "rank1.yaml").read_text())["calls"] == [0, 1, 2]


def _recorded_disagreement(directory: Path) -> None:
    """A two-rank sharded-sampler recording in ``directory`` whose rank 1 passes call 0 again at launch 1."""
    from golden.comm import run_ranks
    from harness.families import adapter, catalog

    [case] = catalog.select(catalog.discover(), family="markov_sharded", names=["basic"])
    static, config, launches = catalog.plan(catalog.load(case.path), 2, 0)

    def rank_body(comm):
        """Record this rank's two calls; rank 1 repeats call 0."""
        system = adapter("markov_sharded").make_system("golden", comm, static, config)
        with rankcheck.recording(system, directory, family="markov_sharded", config=config, static=static,
                                 rank=comm.rank, world=2) as recorder:
            for index in ([0, 0] if comm.rank == 1 else [0, 1]):
                recorder.launch(launches[index].call_inputs, launches[index].call_params)

    try:
        run_ranks(2, rank_body, timeout_s=20)
    except RuntimeError:
        pass


@pytest.mark.parametrize("child", ["crash", "report"])
def test_a_kernel_replay_runs_in_a_child_whose_death_keeps_the_findings(tmp_path, monkeypatch, child):
    """``--impl kernel`` replays in a child process: one that dies (a trap) still leaves the recording's findings
    and a REPLAY ABORTED line; one that writes its report is believed. Real processes; the child is a stand-in."""
    from harness.recording import replay as world_replay
    from harness.families import adapter

    _recorded_disagreement(tmp_path)
    monkeypatch.setattr(type(adapter("markov_sharded")), "check_available", lambda self, impl: None)
    script = {
        "crash": "import os, sys; print('CUDA error: unspecified launch failure', flush=True); os.abort()",
        "report": ("import json, sys; d = sys.argv[1]; json.dump([{'recording': 'r', 'family': 'markov_sharded', "
                   "'findings': ['REPLAY FAILED: rank 0 at launch 1: kernel record: rank 0 launch 1: wait timed out'], "
                   "'notes': []}], open(d + '/world_replay.json', 'w'))"),
    }[child]
    monkeypatch.setattr(world_replay, "child_argv", lambda directory, deadline_s, run_dir: [sys.executable, "-c", script, run_dir])
    [report] = [world_replay.replay_isolated(tmp_path, 5.0)]
    text = "\n".join(report["findings"])
    if child == "crash":
        assert "rank 1 deviates at call 1" in text, text
        assert "REPLAY ABORTED: the kernel replay process ended with exit -6" in text, text
        assert "unspecified launch failure" in text
    else:
        assert report["findings"] == ["REPLAY FAILED: rank 0 at launch 1: kernel record: rank 0 launch 1: wait timed out"]
        assert report["notes"] == ["kernels replayed in a child process (exit 0)"]


def test_a_kernel_replay_without_a_gpu_is_refused_before_any_process(tmp_path, capsys):
    """No CUDA here: ``--impl kernel`` exits 2 and names why, instead of a child that cannot replay."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    _recorded_disagreement(tmp_path)
    code = cli_main(["replay", "--bundle", str(tmp_path), "--impl", "kernel"])
    out = capsys.readouterr().out
    assert code == 2 and "NotAvailable" in out, out


def test_a_world_that_fails_as_a_whole_keeps_the_recordings_findings(tmp_path, monkeypatch):
    """A replayed world that raises outside any call (its teardown after a kernel trap) is a finding in one
    line; the disagreement the recording shows is still reported, and an exception's advice lines are cut."""
    from harness.recording import replay as world_replay

    _recorded_disagreement(tmp_path)
    entry = yaml.safe_load((tmp_path / "rank0.yaml").read_text())
    entry["ended"] = "exception: AcceleratorError: CUDA error: unspecified launch failure\nSearch for it\n"
    (tmp_path / "rank0.yaml").write_text(yaml.safe_dump(entry))

    def failing_world(*args, **kwargs):
        raise RuntimeError("torn down after a trap\nCUDA kernel errors might be asynchronously reported")

    monkeypatch.setattr(world_replay, "run_world", failing_world)
    report = world_replay.replay_one(tmp_path, "golden", 5.0)
    text = "\n".join(report["findings"])
    assert "rank 1 deviates at call 1" in text, text
    assert "REPLAY FAILED: the replayed world ended with RuntimeError: torn down after a trap" in text
    assert "RANK ENDED: rank 0: exception: AcceleratorError: CUDA error: unspecified launch failure" in text
    assert "asynchronously" not in text and "Search for it" not in text
