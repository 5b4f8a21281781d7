"""CPU tests of the recorder: golden systems recorded and replayed with identical
bits (counters included), start states near a wrap carried through the bundle,
tampered bundles refused, a changed recording detected, and the recorder's
own guarantees (inputs copied before the call, nothing written on failure)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file, save_file

from golden.store import raw_sha256
from harness.recording.recorder import Recorder, compare_replay, main, record, replay_bundle, state_tensors
from scenarios.bundle import MANIFEST, PAYLOAD, BundleError, load_bundle


@pytest.fixture(scope="module")
def sharded_bundle(tmp_path_factory) -> Path:
    """markov_sharded/tag_wraparound captured at world 2 through the CLI (golden, rank 0 recorded)."""
    out = tmp_path_factory.mktemp("bundles") / "tag_wrap"
    assert main(["capture", "--family", "markov_sharded", "--scenario", "tag_wraparound", "--out", str(out),
                 "--world", "2"]) == 0
    return out


def test_capture_records_calls_state_and_start(sharded_bundle):
    bundle = load_bundle(sharded_bundle)
    assert bundle.family == "markov_sharded" and bundle.world == 2
    assert bundle.initial_state()["launches"] > 32000, "the scenario starts the launch counter near its wrap"
    for index in range(len(bundle.calls)):
        outputs = bundle.recorded_outputs(index)
        assert {"draft_tokens", "logits_cache", "state.launches"} <= set(outputs)
        assert int(outputs["state.launches"]) == bundle.initial_state()["launches"] + index + 1


def test_replay_cli_identical_bits(sharded_bundle, capsys):
    assert main(["replay", str(sharded_bundle)]) == 0
    assert "identical bits" in capsys.readouterr().out


def _copy_bundle(src: Path, dst: Path) -> Path:
    """A byte copy of a bundle directory."""
    dst.mkdir()
    for name in (MANIFEST, PAYLOAD):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


def test_tampered_payload_is_refused(sharded_bundle, tmp_path, capsys):
    bad = _copy_bundle(sharded_bundle, tmp_path / "bad")
    raw = bytearray((bad / PAYLOAD).read_bytes())
    raw[-3] ^= 0x40  # one bit of the last tensor's data
    (bad / PAYLOAD).write_bytes(bytes(raw))
    with pytest.raises(BundleError, match="sha256 differs"):
        load_bundle(bad)
    assert main(["replay", str(bad)]) == 2
    assert "sha256 differs" in capsys.readouterr().err


def test_pickle_payload_is_refused(sharded_bundle, tmp_path, capsys):
    bad = _copy_bundle(sharded_bundle, tmp_path / "pickled")
    (bad / PAYLOAD).write_bytes(b"\x80\x04\x95" + b"\x00" * 64)
    assert main(["replay", str(bad)]) == 2
    assert "not a safetensors file" in capsys.readouterr().err


def test_consistently_altered_recording_is_a_mismatch(sharded_bundle, tmp_path, capsys):
    """A bundle that loads (digests updated) but records other tokens must fail the replay, naming them."""
    bad = _copy_bundle(sharded_bundle, tmp_path / "altered")
    tensors = load_file(str(bad / PAYLOAD))
    key = "call0.out.draft_tokens"
    tensors[key] = tensors[key].clone()
    tensors[key].view(-1)[0] += 1
    save_file(tensors, str(bad / PAYLOAD), metadata={"format": "rankcheck-bundle-1"})
    manifest = yaml.safe_load((bad / MANIFEST).read_text())
    manifest["tensors"][key]["sha256"] = raw_sha256(tensors[key])
    (bad / MANIFEST).write_text(yaml.safe_dump(manifest, sort_keys=False))
    assert main(["replay", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "1 mismatching elements" in err and "draft_tokens" in err


def test_record_and_replay_allreduce_in_process(tmp_path):
    """The context manager around a golden allreduce system (world 1), replayed on a fresh one."""
    from harness.families import adapter, catalog

    [case] = catalog.select(catalog.discover(), family="allreduce_mhc", names=["generation_wrap"])
    scenario = catalog.load(case.path)
    fam = adapter("allreduce_mhc")
    static, config, launches = catalog.plan(scenario, 1, 0)
    config.update(fam.start_config(scenario.initial_state()))
    from golden.comm import SoloComm

    runnable = [launch for launch in launches if launch.expected_error is None]
    with record(fam.make_system("golden", SoloComm(), static, config), tmp_path / "b", family="allreduce_mhc",
                config=dict(scenario.config), world=1, static=static,
                initial_state=scenario.initial_state()) as recorder:
        live = [recorder.launch(launch.agreed_inputs, launch.agreed_params) for launch in runnable]
    bundle = load_bundle(tmp_path / "b")
    produced = replay_bundle(bundle, fam.make_system("golden", SoloComm(), bundle.recorded_static(), config))
    comparison = compare_replay(bundle, produced)
    assert comparison.ok and comparison.elements > 0
    assert all(torch.equal(produced[i]["residual_out"], live[i]["residual_out"]) for i in range(len(live)))
    # A system started at a different generation must not pass as the recording.
    fresh = dict(config)
    fresh.update(fam.start_config({k: 0 for k in scenario.initial_state()}))
    other = replay_bundle(bundle, fam.make_system("golden", SoloComm(), bundle.recorded_static(), fresh))
    assert not compare_replay(bundle, other).ok


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


def test_recorder_copies_inputs_before_the_call():
    recorder = Recorder(_Doubler())
    x = torch.arange(4)
    out = recorder.launch({"x": x}, {"add": 1})
    assert torch.equal(recorder.calls[0][0]["x"], torch.arange(4)), "inputs must be copied before the call"
    assert torch.equal(out["y"], torch.arange(4) * 2 + 1)
    assert torch.equal(recorder.outputs[0]["y"], out["y"]) and int(recorder.outputs[0]["state.calls"]) == 1
    out["y"].zero_()
    assert recorder.outputs[0]["y"].sum() != 0, "outputs must be copied, not aliased"
    with pytest.raises(ValueError, match="fail was requested"):
        recorder.launch({"x": x}, {"fail": True})
    assert len(recorder.calls) == 1, "a call that raised is not recorded"


def test_record_writes_nothing_when_the_block_raises(tmp_path):
    with pytest.raises(RuntimeError, match="boom"):
        with record(_Doubler(), tmp_path / "b", family="markov_sharded", config={}, world=1, static={}) as rec:
            rec.launch({"x": torch.ones(2)}, {})
            raise RuntimeError("boom")
    assert not (tmp_path / "b").exists()


def test_record_checks_arguments_before_any_call(tmp_path):
    system = _Doubler()
    with pytest.raises(ValueError, match="world: expected an int >= 1"):
        with record(system, tmp_path / "b", family="markov_sharded", config={}, world=0, static={}):
            pass
    with pytest.raises(TypeError, match=r"static\['w'\]: expected a tensor"):
        with record(system, tmp_path / "b", family="markov_sharded", config={}, world=1, static={"w": 3}):
            pass
    with pytest.raises(TypeError, match="has no launch"):
        Recorder(object())
    assert system.calls == 0


def test_record_refuses_to_overwrite(sharded_bundle):
    with pytest.raises(FileExistsError, match="already holds a bundle"):
        with record(_Doubler(), sharded_bundle, family="markov_sharded", config={}, world=1, static={}):
            pass


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
