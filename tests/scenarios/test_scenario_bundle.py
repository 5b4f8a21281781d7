"""Recorded bundles round-trip bit for bit (strided views included), replay
through the builders, and refuse tampered digests and non-safetensors
payloads."""

from __future__ import annotations

import pickle
import shutil

import pytest
import torch
import yaml

from golden.store import tensor_digest
from scenarios.builders import build_call, build_static
from scenarios.bundle import MANIFEST, PAYLOAD, BundleError, RecordedScenario, load_bundle, save_bundle
from scenarios.loader import get


def _record(tmp_path, name, world, *, with_outputs=False):
    s = get(name)
    static = build_static(s)
    calls = [build_call(s, i, world) for i in range(len(s.calls))]
    outputs = None
    if with_outputs:
        # stand-in outputs (this test checks storage, not arithmetic): any tensors of several dtypes
        outputs = [{"tokens": torch.arange(6, dtype=torch.int64).reshape(2, 3),
                    "neg_zero": torch.tensor([-0.0, 0.0], dtype=torch.bfloat16)} for _ in calls]
    path = save_bundle(tmp_path / "bundle", family=s.family, config=s.config, world=world, static=static,
                       calls=calls, outputs=outputs, state=s.initial_state(), name=s.name,
                       source=s.full_name)
    return s, static, calls, outputs, path


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and a.storage_offset() == b.storage_offset() and tensor_digest(a) == tensor_digest(b))


@pytest.mark.parametrize("name,world", [("markov_fused/misaligned_stride", 2), ("markov_sharded/tag_wraparound", 4),
                                        ("allreduce_mhc/finalize", 2)])
def test_round_trip_bit_for_bit(tmp_path, name, world):
    s, static, calls, _, path = _record(tmp_path, name, world, with_outputs=True)
    b = load_bundle(path)
    assert isinstance(b, RecordedScenario) and b.family == s.family and b.world == world
    assert b.worlds == (world,) and b.initial_state() == s.initial_state()
    assert b.provenance["producer"] == "recorder" and b.provenance["source"] == s.full_name
    st = build_static(b)
    assert set(st) == set(static) and all(_same(st[k], static[k]) for k in static)
    for i, (inputs, params) in enumerate(calls):
        got, got_params = build_call(b, i, world)
        assert got_params == params and set(got) == set(inputs)
        assert all(_same(got[k], inputs[k]) for k in inputs), i
        outs = b.recorded_outputs(i)
        assert torch.equal(outs["neg_zero"].view(torch.int16), torch.tensor([-32768, 0], dtype=torch.int16))
    assert [c.rows for c in b.calls] == [c.rows for c in s.calls]
    with pytest.raises(ValueError, match=f"recorded at world {world}"):
        build_call(b, 0, world * 2)


def test_replayed_tensors_are_fresh_copies(tmp_path):
    _, _, calls, _, path = _record(tmp_path, "markov_fused/basic", 1)
    b = load_bundle(path)
    first, _ = build_call(b, 0, 1)
    first["base"].fill_(0)
    again, _ = build_call(b, 0, 1)
    assert _same(again["base"], calls[0][0]["base"])


def test_tampered_payload_rejected(tmp_path):
    *_, path = _record(tmp_path, "markov_sharded/basic", 2)
    data = bytearray((path / PAYLOAD).read_bytes())
    data[-3] ^= 0x01  # a bit of the last tensor's data
    (path / PAYLOAD).write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"tensors\..*: sha256 differs"):
        load_bundle(path)


def test_tampered_manifest_digest_rejected(tmp_path):
    *_, path = _record(tmp_path, "allreduce_mhc/basic_ll", 2)
    manifest = yaml.safe_load((path / MANIFEST).read_text())
    manifest["tensors"]["call1.x"]["sha256"] = "0" * 64
    (path / MANIFEST).write_text(yaml.safe_dump(manifest))
    with pytest.raises(BundleError, match=r"tensors\.call1\.x: sha256 differs"):
        load_bundle(path)


def test_manifest_shape_mismatch_rejected(tmp_path):
    *_, path = _record(tmp_path, "allreduce_mhc/basic_ll", 1)
    manifest = yaml.safe_load((path / MANIFEST).read_text())
    manifest["tensors"]["call0.post"]["dtype"] = "float64"
    (path / MANIFEST).write_text(yaml.safe_dump(manifest))
    with pytest.raises(BundleError, match=r"tensors\.call0\.post: payload has float32"):
        load_bundle(path)


def test_pickle_payload_rejected(tmp_path):
    *_, path = _record(tmp_path, "markov_fused/basic", 1)
    (path / PAYLOAD).write_bytes(pickle.dumps({"w1": [1, 2, 3]}))
    with pytest.raises(BundleError, match="not a safetensors file"):
        load_bundle(path)


def test_other_payload_names_rejected(tmp_path):
    *_, path = _record(tmp_path, "markov_fused/basic", 1)
    shutil.copy(path / PAYLOAD, path / "tensors.pt")
    manifest = yaml.safe_load((path / MANIFEST).read_text())
    manifest["payload"] = "tensors.pt"
    (path / MANIFEST).write_text(yaml.safe_dump(manifest))
    with pytest.raises(BundleError, match="payload: only tensors.safetensors is accepted"):
        load_bundle(path)


def test_extra_or_missing_tensors_rejected(tmp_path):
    *_, path = _record(tmp_path, "markov_fused/basic", 1)
    manifest = yaml.safe_load((path / MANIFEST).read_text())
    del manifest["tensors"]["static.w2"]
    (path / MANIFEST).write_text(yaml.safe_dump(manifest))
    with pytest.raises(BundleError, match=r"payload holds \['static.w2'\] not in the manifest"):
        load_bundle(path)


def test_manifest_unknown_key_and_python_tags(tmp_path):
    *_, path = _record(tmp_path, "markov_fused/basic", 1)
    text = (path / MANIFEST).read_text()
    (path / MANIFEST).write_text(text + "colour: red\n")
    with pytest.raises(BundleError, match="colour: unknown key"):
        load_bundle(path)
    (path / MANIFEST).write_text(text + "x: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(BundleError, match="not valid YAML"):
        load_bundle(path)


def test_invalid_config_in_manifest_named(tmp_path):
    *_, path = _record(tmp_path, "markov_sharded/basic", 2)
    manifest = yaml.safe_load((path / MANIFEST).read_text())
    manifest["config"]["steps"] = 11
    (path / MANIFEST).write_text(yaml.safe_dump(manifest))
    with pytest.raises(Exception, match=r"manifest.yaml: config.steps"):
        load_bundle(path)


def test_outputs_must_match_calls(tmp_path):
    s = get("markov_fused/basic")
    with pytest.raises(ValueError, match="outputs: expected one mapping per call"):
        save_bundle(tmp_path / "b", family=s.family, config=s.config, world=1, static=build_static(s),
                    calls=[build_call(s, 0, 1)], outputs=[{}, {}])
