"""CPU tests of ``harness record``: a scenario captured as a world recording (every rank recorded, the format every
recording path writes) and replayed with identical bits (counters included), start states near a wrap carried
through, tampered recordings refused, a changed recording or start detected, and the recorder's own guarantees
(inputs copied before the call, outputs written in place recorded, a call that raised not kept, arguments checked
before any call)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

import rankcheck
from golden.store import raw_sha256
from harness.recording.capture import main
from harness.recording.recorder import RecordedObject, Recorder, state_tensors
from harness.recording.replay import replay_one
from harness.recording.world import load_world
from scenarios.bundle import MANIFEST, PAYLOAD

pytestmark = pytest.mark.usefixtures("one_intra_op_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def sharded_recording(tmp_path_factory) -> Path:
    """markov_sharded/tag_wraparound captured at world 2 through the CLI (golden, every rank recorded)."""
    out = tmp_path_factory.mktemp("recordings") / "tag_wrap"
    assert main(["capture", "--family", "markov_sharded", "--scenario", "tag_wraparound", "--out", str(out),
                 "--world", "2"]) == 0
    return out


def test_capture_records_every_rank_its_calls_and_counters(sharded_recording):
    world = load_world(sharded_recording)
    assert world.world == 2 and world.objects[0]["family"] == "markov_sharded"
    for rank in world.ranks:
        start = rank.call(0)["state_before"]["launches"]
        assert start > 32000, "the scenario starts the launch counter near its wrap"
        for position, call in enumerate(rank.bundle.calls):
            outputs = rank.bundle.outputs(position)
            assert {"return.draft_tokens", "return.logits_cache", "state.launches"} <= set(outputs)
            assert int(outputs["state.launches"]) == start + position + 1
        assert rank.entry["ended"] == "exit" and rank.entry["calls"] == list(range(len(rank.bundle.calls)))


def test_replay_cli_identical_bits(sharded_recording, capsys):
    assert main(["replay", str(sharded_recording)]) == 0
    assert "verdict: ok" in capsys.readouterr().out


def _copy(src: Path, dst: Path) -> tuple[Path, Path]:
    """A copy of a recording and the path of its rank 0 bundle."""
    shutil.copytree(src, dst)
    return dst, dst / load_world(dst).ranks[0].entry["bundle"]


def test_tampered_payload_is_refused(sharded_recording, tmp_path, capsys):
    bad, bundle = _copy(sharded_recording, tmp_path / "bad")
    raw = bytearray((bundle / PAYLOAD).read_bytes())
    raw[-3] ^= 0x40  # one bit of the last tensor's data
    (bundle / PAYLOAD).write_bytes(bytes(raw))
    assert main(["replay", str(bad)]) == 2
    assert "sha256 differs" in capsys.readouterr().out


def test_pickle_payload_is_refused(sharded_recording, tmp_path, capsys):
    bad, bundle = _copy(sharded_recording, tmp_path / "pickled")
    (bundle / PAYLOAD).write_bytes(b"\x80\x04\x95" + b"\x00" * 64)
    assert main(["replay", str(bad)]) == 2
    assert "not a safetensors file" in capsys.readouterr().out


def test_consistently_altered_recording_is_a_mismatch(sharded_recording, tmp_path, capsys):
    """A recording that loads (digests updated) but records other tokens must fail the replay, naming them."""
    bad, bundle = _copy(sharded_recording, tmp_path / "altered")
    tensors = load_file(str(bundle / PAYLOAD))
    key = "call0.out.return.draft_tokens"
    tensors[key] = tensors[key].clone()
    tensors[key].view(-1)[0] += 1
    save_file(tensors, str(bundle / PAYLOAD))
    manifest = yaml.safe_load((bundle / MANIFEST).read_text())
    manifest["tensors"][key]["sha256"] = raw_sha256(tensors[key])
    (bundle / MANIFEST).write_text(yaml.safe_dump(manifest, sort_keys=False))
    assert main(["replay", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH: rank 0 call 0 (system.launch): replay differs from the recording in 1 elements" in out, out
    assert "return.draft_tokens" in out


def test_record_and_replay_allreduce_in_process(tmp_path):
    """A golden allreduce system (world 1) recorded through rankcheck.recording and replayed; the same recording
    with another start generation in its manifest must not pass."""
    from golden.comm import SoloComm
    from harness.families import adapter, catalog

    [case] = catalog.select(catalog.discover(), family="allreduce_mhc", names=["generation_wrap"])
    scenario = catalog.load(case.path)
    fam = adapter("allreduce_mhc")
    static, config, launches = catalog.plan(scenario, 1, 0)
    config.update(fam.start_config(scenario.initial_state()))
    system = fam.make_system("golden", SoloComm(), static, config)
    with rankcheck.recording(system, tmp_path / "rec", family="allreduce_mhc", config=config, static=static,
                             rank=0, world=1) as recorded:
        live = [recorded.launch(launch.agreed_inputs, launch.agreed_params)
                for launch in launches if launch.expected_error is None]
    report = replay_one(tmp_path / "rec", "golden", 60.0)
    assert report["findings"] == [] and len(live) > 1, report
    bundle = tmp_path / "rec" / load_world(tmp_path / "rec").ranks[0].entry["bundle"]
    manifest = yaml.safe_load((bundle / MANIFEST).read_text())
    assert manifest["objects"][0]["config"]["start_generation"] != 0, "the scenario starts at another generation"
    manifest["objects"][0]["config"]["start_generation"] = 0
    (bundle / MANIFEST).write_text(yaml.safe_dump(manifest, sort_keys=False))
    report = replay_one(tmp_path / "rec", "golden", 60.0)
    assert any(line.startswith("MISMATCH") and "generation" in line for line in report["findings"]), report


class _Doubler:
    """A toy system that doubles ``x`` in place and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def launch(self, call_inputs, call_params):
        if call_params.get("fail"):
            raise ValueError("call_params: fail was requested")
        call_inputs["x"].mul_(2)
        self.calls += 1
        return {"y": call_inputs["x"] + call_params.get("add", 0)}

    def state(self):
        return {"calls": self.calls}


def test_recorder_copies_inputs_before_the_call_and_keeps_what_it_wrote():
    recorder = Recorder()
    proxy = RecordedObject(_Doubler(), "system", recorder, ("launch",))
    x = torch.arange(4)
    out = proxy.launch({"x": x}, {"add": 1})
    kept = recorder.calls[0]
    assert torch.equal(kept.inputs["call_inputs.x"], torch.arange(4)), "inputs must be copied before the call"
    assert torch.equal(kept.outputs["call_inputs.x"], torch.arange(4) * 2), "an input written in place is an output"
    assert torch.equal(out["y"], torch.arange(4) * 2 + 1)
    assert torch.equal(kept.outputs["return.y"], out["y"]) and int(kept.outputs["state.calls"]) == 1
    assert kept.arguments["call_params"] == {"$dict": {"add": 1}}
    out["y"].zero_()
    assert kept.outputs["return.y"].sum() != 0, "outputs must be copied, not aliased"
    with pytest.raises(ValueError, match="fail was requested"):
        proxy.launch({"x": x}, {"fail": True})
    assert len(recorder.calls) == 1 and recorder.in_flight is not None, "a call that raised stays in flight"
    with pytest.raises(TypeError):
        proxy.launch({"x": x}, {}, "one argument too many")
    assert recorder.calls_made == 2, "a call with the wrong arity is refused before it is recorded"


def test_recording_checks_arguments_before_any_call(tmp_path):
    system = _Doubler()
    with pytest.raises(TypeError, match=r"static: expected a mapping of tensors"):
        with rankcheck.recording(system, tmp_path / "a", family="markov_sharded", config={}, static={"w": 3},
                                 rank=0, world=1):
            pass
    with pytest.raises(TypeError, match="has no launch"):
        with rankcheck.recording(object(), tmp_path / "a", family="markov_sharded", config={}, static={},
                                 rank=0, world=1):
            pass
    with pytest.raises(TypeError, match="expected a public kernel object"):
        with rankcheck.recording({"mine": system}, tmp_path / "a", rank=0, world=1):
            pass
    with pytest.raises(ValueError, match="rank: expected 0 <= rank < world"):
        with rankcheck.recording(system, tmp_path / "a", family="markov_sharded", config={}, static={},
                                 rank=2, world=2):
            pass
    with pytest.raises(ValueError, match="max_calls"):
        Recorder(max_calls=0)
    assert system.calls == 0 and not (tmp_path / "a").exists()


def test_capture_refuses_to_overwrite(sharded_recording, capsys):
    assert main(["capture", "--family", "markov_sharded", "--scenario", "tag_wraparound", "--out",
                 str(sharded_recording), "--world", "2"]) == 2
    assert "already holds a recording" in capsys.readouterr().err


def test_state_tensors_reject_non_ints():
    assert state_tensors({"a": 3})["state.a"].dtype == torch.int64
    with pytest.raises(TypeError, match=r"state\(\)\['a'\]: expected an int"):
        state_tensors({"a": 1.5})
    with pytest.raises(TypeError, match=r"state\(\)\['b'\]: expected an int"):
        state_tensors({"b": True})


def test_capture_cli_errors(tmp_path, capsys):
    assert main(["capture", "--family", "markov_sharded", "--scenario", "no_such", "--out", str(tmp_path / "x")]) == 2
    assert "no scenario named" in capsys.readouterr().err
    assert main(["capture", "--family", "markov_sharded", "--scenario", "tag_wraparound", "--out",
                 str(tmp_path / "y"), "--world", "3"]) == 2
    assert "--world" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "missing")]) == 2
