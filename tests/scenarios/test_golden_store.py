"""The golden-bit store: records, checks, and refuses every kind of
difference (an output's bits, its dtype or shape, the inputs) without ever
regenerating silently."""

from __future__ import annotations

import json

import pytest
import torch

from golden.store import (GoldenMismatch, GoldenMissing, GoldenStore, InputDigestMismatch, inputs_digest,
                          tensor_digest)
from scenarios.builders import build_call, build_static
from scenarios.loader import get


def _outputs():
    return {"tokens": torch.tensor([[3, 1], [4, 1]], dtype=torch.int64),
            "cache": torch.tensor([1.5, -0.0, 2.0], dtype=torch.bfloat16)}


def test_digest_sees_bits_dtype_and_shape():
    a = torch.tensor([0.0, 1.0], dtype=torch.bfloat16)
    assert tensor_digest(a) != tensor_digest(torch.tensor([-0.0, 1.0], dtype=torch.bfloat16))
    assert tensor_digest(a) != tensor_digest(a.to(torch.float16))
    assert tensor_digest(a) != tensor_digest(a.reshape(2, 1))
    nan1 = torch.tensor([0x7FC0], dtype=torch.int16).view(torch.bfloat16)
    nan2 = torch.tensor([0x7FC1], dtype=torch.int16).view(torch.bfloat16)
    assert tensor_digest(nan1) != tensor_digest(nan2)  # NaN payloads are bits too
    wide = torch.zeros(4, 6)[:, ::2]
    assert tensor_digest(wide) == tensor_digest(wide.contiguous())


def test_inputs_digest_of_a_scenario():
    s = get("markov_fused/basic")
    calls = [build_call(s, i, 1)[0] for i in range(len(s.calls))]
    d = inputs_digest(build_static(s), *calls)
    assert d == inputs_digest(build_static(s), *[build_call(s, i, 1)[0] for i in range(len(s.calls))])
    assert d != inputs_digest(build_static(s), *calls[:-1])
    calls[1]["pos"][0, 0] += 1
    assert d != inputs_digest(build_static(s), *calls)


def test_record_then_check(tmp_path):
    store = GoldenStore(tmp_path)
    entry = store.record("markov_fused/basic", "ab" * 32, _outputs(), variant="world=2")
    assert entry["provenance"]["producer"] == "golden" and entry["provenance"]["torch"] == str(torch.__version__)
    assert {"device", "git", "date"} <= set(entry["provenance"])
    store.check("markov_fused/basic", "ab" * 32, _outputs(), variant="world=2")
    data = json.loads(store.path("markov_fused").read_text())
    assert list(data["entries"]) == ["markov_fused/basic@world=2"]
    assert store.path("markov_fused").stat().st_size < 2000


def test_output_mismatch_names_scenario_and_output(tmp_path):
    store = GoldenStore(tmp_path)
    store.record("allreduce_mhc/basic_ll", "cd" * 32, _outputs())
    bad = _outputs()
    bad["cache"][1] = 0.0  # -0.0 -> +0.0: one bit
    with pytest.raises(GoldenMismatch, match=r"allreduce_mhc/basic_ll: output cache: digest"):
        store.check("allreduce_mhc/basic_ll", "cd" * 32, bad)
    wrong_dtype = _outputs()
    wrong_dtype["tokens"] = wrong_dtype["tokens"].to(torch.int32)
    with pytest.raises(GoldenMismatch, match="output tokens"):
        store.check("allreduce_mhc/basic_ll", "cd" * 32, wrong_dtype)
    missing = _outputs()
    del missing["tokens"]
    with pytest.raises(GoldenMismatch, match=r"missing \['tokens'\]"):
        store.check("allreduce_mhc/basic_ll", "cd" * 32, missing)


def test_input_digest_mismatch_is_an_error(tmp_path):
    store = GoldenStore(tmp_path)
    store.record("markov_sharded/basic", "11" * 32, _outputs())
    with pytest.raises(InputDigestMismatch, match="markov_sharded/basic: inputs differ.*make golden"):
        store.check("markov_sharded/basic", "22" * 32, _outputs())


def test_missing_entry(tmp_path):
    with pytest.raises(GoldenMissing, match="markov_fused/nope: no golden bits stored"):
        GoldenStore(tmp_path).check("markov_fused/nope", "00" * 32, _outputs())


def test_never_silently_regenerated(tmp_path):
    store = GoldenStore(tmp_path)
    first = store.record("markov_fused/basic", "aa" * 32, _outputs())
    assert store.record("markov_fused/basic", "aa" * 32, _outputs()) == first  # same bits: kept
    changed = _outputs()
    changed["tokens"][0, 0] = 9
    with pytest.raises(GoldenMismatch, match="output tokens"):
        store.record("markov_fused/basic", "aa" * 32, changed)
    with pytest.raises(InputDigestMismatch):
        store.record("markov_fused/basic", "bb" * 32, _outputs())
    store.check("markov_fused/basic", "aa" * 32, _outputs())  # untouched by the refusals
    store.record("markov_fused/basic", "aa" * 32, changed, regenerate=True)
    store.check("markov_fused/basic", "aa" * 32, changed)


def test_scenario_objects_and_bad_names(tmp_path):
    store = GoldenStore(tmp_path)
    s = get("markov_fused/basic")
    store.record(s, "aa" * 32, _outputs())
    store.check(s, "aa" * 32, _outputs())
    with pytest.raises(ValueError, match="family/name"):
        store.record("basic", "aa" * 32, _outputs())


def test_families_in_separate_files(tmp_path):
    store = GoldenStore(tmp_path)
    store.record("markov_fused/a", "aa" * 32, _outputs())
    store.record("allreduce_mhc/b", "aa" * 32, _outputs())
    # One file in each family's own folder, nothing else beside them.
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == [
        "allreduce_mhc/golden_bits.json", "markov_fused/golden_bits.json"]
