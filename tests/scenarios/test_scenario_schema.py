"""Malformed scenario files are rejected with a message naming the file and
the field; valid ones get their defaults and launch expansion."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from scenarios.loader import discover, load
from scenarios.schema import ScenarioError, validate

FUSED = {
    "name": "pad",
    "family": "markov_fused",
    "description": "d",
    "seed": 1,
    "worlds": [1, 2, 4],
    "size": "cpu",
    "config": {"vocab": 2048, "dim": 256, "max_reqs": 8},
    "calls": [{"rows": 2, "steps": 2}, {"rows": 3, "steps": 4}],
    "expect": {"outcome": "golden"},
}
SHARDED = {
    "name": "s", "family": "markov_sharded", "description": "d", "seed": 1, "worlds": [1, 2],
    "size": "cpu", "config": {"vocab": 2048, "steps": 2, "max_reqs": 8},
    "calls": [{"rows": 2}], "expect": {"outcome": "golden"},
}
ALLREDUCE = {
    "name": "a", "family": "allreduce_mhc", "description": "d", "seed": 1, "worlds": [1, 2, 4],
    "size": "cpu", "config": {"hidden": 256, "hc": 4, "capacity": 64, "bt_min_rows": 16},
    "calls": [{"rows": 4}, {"rows": 20}], "expect": {"outcome": "golden"},
}


def _write(tmp_path: Path, raw: dict) -> Path:
    folder = tmp_path / raw.get("family", "markov_fused")
    folder.mkdir(exist_ok=True)
    path = folder / f"{raw.get('name', 'x')}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _reject(tmp_path: Path, raw: dict, field: str, what: str) -> None:
    path = _write(tmp_path, raw)
    with pytest.raises(ScenarioError) as info:
        load(path)
    message = str(info.value)
    assert message.startswith(str(path)) or message.startswith(f"{path.parent.name}/") or str(path) in message
    assert re.search(f": {field}: ", message), message
    assert re.search(what, message), message


def _with(base: dict, **changes) -> dict:
    raw = copy.deepcopy(base)
    for dotted, value in changes.items():
        node = raw
        parts = dotted.split("__")
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node[part]
        last = parts[-1]
        if value is _DELETE:
            del node[last]
        elif last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value
    return raw


_DELETE = object()


def test_valid_file_loads_with_defaults(tmp_path):
    s = load(_write(tmp_path, FUSED))
    assert s.full_name == "markov_fused/pad"
    assert s.config["block"] == 1024 and s.config["has_cap"] is False
    assert s.config["inv_cap"] == pytest.approx(1 / 30)
    assert [c.graph for c in s.calls] == ["rows=2,steps=2", "rows=3,steps=4"]
    assert [launch.call_index for launch in s.launches()] == [0, 1]


def test_message_names_file_and_field_exactly(tmp_path):
    raw = _with(FUSED, calls__1__rows="x")
    path = _write(tmp_path, raw)
    with pytest.raises(ScenarioError) as info:
        load(path)
    assert str(info.value) == f"{path}: calls[1].rows: expected int in 1..2147483647, got 'x'"


def test_repo_relative_path_in_message(tmp_path):
    from scenarios.loader import DEFAULT_ROOT, _display
    assert _display(DEFAULT_ROOT / "markov_fused" / "pad.yaml") == "scenarios/markov_fused/pad.yaml"


@pytest.mark.parametrize("raw,field,what", [
    (_with(FUSED, colour="red"), "colour", "unknown key"),
    (_with(FUSED, config__vocabulary=3), "config.vocabulary", "unknown key"),
    (_with(FUSED, calls__0__rowz=1), r"calls\[0\].rowz", "unknown key"),
    (_with(FUSED, seed="1"), "seed", "expected int"),
    (_with(FUSED, seed=True), "seed", "expected int"),
    (_with(FUSED, worlds="4"), "worlds", "expected a list"),
    (_with(FUSED, size="medium"), "size", "cpu, gpu"),
    (_with(FUSED, family="markov"), "family", "one of"),
    (_with(FUSED, config__has_cap="yes"), "config.has_cap", "true or false"),
    (_with(FUSED, config__vocab=2050), "config.vocab", "not divisible by world 4"),
    (_with(FUSED, worlds=[3]), "worlds", "power of two"),
    (_with(FUSED, calls__0__steps=9), r"calls\[0\].steps", r"1\.\.8"),
    (_with(FUSED, calls__0__steps=0), r"calls\[0\].steps", r"1\.\.8"),
    (_with(FUSED, calls__0__rows=9), r"calls\[0\].rows", "max_reqs"),
    (_with(FUSED, calls=[]), "calls", "length"),
    (_with(FUSED, config={"vocab": 2048, "tp": 2, "dim": 256, "max_reqs": 8}), "config.tp", "worlds"),
    (_with(FUSED, description=_DELETE), "description", "required"),
    (_with(FUSED, inputs={"temperatures": [0.7]}), r"inputs.temperatures\[0\]", "power of two"),
    (_with(FUSED, graph={"capture": False, "replays": 2}), "graph.replays", "capture"),
    (_with(FUSED, expect={"outcome": "error"}), "expect.error", "required"),
    (_with(FUSED, expect={"outcome": "golden", "timeout": {"rank": 0, "launch": 0}}), "expect.timeout", "only"),
    (_with(FUSED, tolerance={"ulps": 2}), "tolerance.reason", "required"),
    (_with(FUSED, config__has_cap=True, tolerance={"ulps": 0, "reason": "r"}), "tolerance.ulps", ">= 1|1\\.\\."),
    (_with(FUSED, name="Bad-Name"), "name", "matching"),
    (_with(SHARDED, calls__0__rows=9), r"calls\[0\].rows", "max_rows"),
    (_with(SHARDED, config__max_reqs=1), r"calls\[0\].rows", "max_reqs"),
    (_with(SHARDED, calls__0__steps=3), r"calls\[0\].steps", "config.steps=2"),
    (_with(SHARDED, config__base_dtype="float16"), "config.base_dtype", "bfloat16, float32"),
    (_with(SHARDED, config__vocab=2056), "config.vocab", "16 \\* world"),
    (_with(SHARDED, calls__0__params={"query_per_row": 0}), r"calls\[0\].params.query_per_row", ">= 1|1\\.\\.64"),
    (_with(ALLREDUCE, calls__1__rows=65), r"calls\[1\].rows", "capacity"),
    (_with(ALLREDUCE, calls__0__steps=2), r"calls\[0\].steps", "no steps"),
    (_with(ALLREDUCE, config__quantize=True, config__hidden=264), "config.hidden", "multiple of 128"),
    (_with(ALLREDUCE, config__quantize=True, config__hidden=288), "config.hidden", "multiple of 128"),
    (_with(FUSED, tolerance={"ulps": 1, "reason": "r"}), "tolerance", "exactly"),
    (_with(ALLREDUCE, config__hidden=260), "config.hidden", "multiple of 8"),
    (_with(ALLREDUCE, config__residual_only=True, config__quantize=True), "config.quantize", "residual_only"),
    (_with(ALLREDUCE, calls__0__params={"protocol": "ring"}), r"calls\[0\].params.protocol", "auto, ll, bt"),
    (_with(ALLREDUCE, inputs={"experts": 66}), "inputs.experts", "world 4"),
])
def test_rejected(tmp_path, raw, field, what):
    _reject(tmp_path, raw, field, what)


@pytest.mark.parametrize("inject,field,what", [
    ([{"kind": "melt"}], r"inject\[0\].kind", "one of"),
    ([{"rows": [0]}], r"inject\[0\].kind", "non-empty string"),
    ([{"kind": "padding_rows"}], r"inject\[0\].rows", "required"),
    ([{"kind": "padding_rows", "rows": [0], "extra": 1}], r"inject\[0\].extra", "unknown key"),
    ([{"kind": "padding_rows", "rows": [5]}], r"inject\[0\].rows\[0\]", r"0\.\.2"),
    ([{"kind": "padding_rows", "rows": [0], "calls": [2]}], r"inject\[0\].calls\[0\]", r"0\.\.1"),
    ([{"kind": "generation", "value": 1}], r"inject\[0\].kind", "does not apply to markov_fused"),
    ([{"kind": "nan_logits", "positions": [{"row": 0, "step": 0, "vocab": "edge"}]}],
     r"inject\[0\].positions\[0\].vocab", "matching"),
    ([{"kind": "nan_logits", "positions": [{"row": 0, "step": 0, "vocab": 2048}]}],
     r"inject\[0\].positions\[0\].vocab", r"0\.\.2047"),
    ([{"kind": "corrupt_token_ids", "rows": [0, 1], "values": [-1]}], r"inject\[0\].values", "one value per row"),
    ([{"kind": "corrupt_token_ids", "rows": [0], "values": ["W+1"]}], r"inject\[0\].values\[0\]", "matching"),
    ([{"kind": "hang", "rank": 1, "launch": 0}], r"inject\[0\].rank", r"0\.\.0"),
    ([{"kind": "hang", "rank": 0, "launch": 2}], r"inject\[0\].launch", r"0\.\.1"),
    ([{"kind": "crash", "rank": 0, "launch": 0, "how": "melt"}], r"inject\[0\].how", "exit, signal, exception"),
    ([{"kind": "bad_input", "call": 0, "argument": "weights", "how": "wrong_dtype"}], r"inject\[0\].argument",
     "input_ids"),
    ([{"kind": "bad_input", "call": 0, "argument": "base", "how": "wrong_shape", "dtype": "float16"}],
     r"inject\[0\].dtype", "wrong_dtype"),
    ([{"kind": "rank_disagree", "rank": 0, "call": 0, "field": "colour", "value": 1}], r"inject\[0\].field",
     "rows, steps"),
    ([{"kind": "misaligned_stride", "argument": "pos"}], r"inject\[0\].argument", "base, cache"),
])
def test_rejected_injections(tmp_path, inject, field, what):
    _reject(tmp_path, _with(FUSED, worlds=[1], inject=inject), field, what)


def test_adversarial_sum_needs_its_ranks_at_every_world(tmp_path):
    raw = _with(ALLREDUCE, inject=[{"kind": "adversarial_sum", "positions": [[0, 0]]}])
    _reject(tmp_path, raw, r"inject\[0\].ranks\[1\]", r"expected int in 0\.\.0, got 1")
    raw["worlds"] = [4]
    assert load(_write(tmp_path, raw)).injections("adversarial_sum")


def test_timeout_rank_must_exist(tmp_path):
    raw = _with(FUSED, worlds=[2], expect={"outcome": "timeout", "timeout": {"rank": 2, "launch": 0}})
    _reject(tmp_path, raw, "expect.timeout.rank", r"0\.\.1")


def test_file_stem_must_be_the_name(tmp_path):
    path = _write(tmp_path, FUSED).rename(tmp_path / "markov_fused" / "other.yaml")
    with pytest.raises(ScenarioError, match="name: expected the file's stem 'other'"):
        load(path)


def _write_text(tmp_path: Path, family: str, file_name: str, text: str) -> Path:
    """Write ``text`` as ``<tmp_path>/<family>/<file_name>`` and return its path."""
    folder = tmp_path / family
    folder.mkdir(exist_ok=True)
    path = folder / file_name
    path.write_text(text)
    return path


def test_directory_must_be_the_family(tmp_path):
    path = _write_text(tmp_path, "markov_sharded", "pad.yaml", yaml.safe_dump(FUSED))
    with pytest.raises(ScenarioError, match=r"pad.yaml: family: file is under scenarios/markov_sharded/"):
        load(path)


def test_not_yaml_not_a_mapping_and_python_tags_are_refused(tmp_path):
    for file_name, text, message in (("a.yaml", "name: [unclosed\n", "a.yaml: not valid YAML"),
                                     ("b.yaml", "- 1\n- 2\n", "b.yaml: : expected a mapping"),
                                     ("evil.yaml", "name: !!python/object/apply:os.system ['true']\n",
                                      "evil.yaml: not valid YAML")):
        with pytest.raises(ScenarioError, match=message):
            load(_write_text(tmp_path, "markov_fused", file_name, text))


def test_duplicate_names_rejected(tmp_path):
    _write(tmp_path, FUSED)
    second = tmp_path / "markov_fused" / "pad.yml"
    second.write_text(yaml.safe_dump(FUSED))
    with pytest.raises(ScenarioError, match="markov_fused/pad is already defined"):
        discover(tmp_path)


def test_launch_expansion_and_injections_for():
    raw = _with(FUSED, worlds=[2], graph={"capture": True, "replays": 1},
                calls=[{"rows": 2, "steps": 2, "repeat": 2}, {"rows": 1, "steps": 1}],
                inject=[{"kind": "hang", "rank": 1, "launch": 4},
                        {"kind": "rank_disagree", "rank": 0, "call": 1, "field": "rows", "value": 2},
                        {"kind": "bad_input", "call": 0, "argument": "pos", "how": "missing"}])
    s = validate(raw, "mem.yaml")
    launches = s.launches()
    assert [(x.call_index, x.repeat_index, x.pass_index) for x in launches] == [
        (0, 0, 0), (0, 1, 0), (1, 0, 0), (0, 0, 1), (0, 1, 1), (1, 0, 1)]
    assert [i.kind for i in s.injections_for(1, 4)] == ["hang", "bad_input"]
    assert [i.kind for i in s.injections_for(1, 3)] == ["bad_input"]
    assert [i.kind for i in s.injections_for(0, 4)] == ["bad_input"]
    assert [i.kind for i in s.injections_for(0, 5)] == ["rank_disagree"]
    assert s.injections_for(1, 5) == []
    assert s.bad_call_indices() == {0}
    assert s.inject[2].get("error").match == "pos"


def test_initial_state_from_injections():
    raw = _with(SHARDED, inject=[{"kind": "launch_counter", "value": 32760}])
    assert validate(raw, "m.yaml").initial_state() == {"launches": 32760}
    raw = _with(ALLREDUCE, inject=[{"kind": "generation", "value": 2, "protocol": "bt"},
                                   {"kind": "generation", "value": 1, "protocol": "ll"}])
    assert validate(raw, "m.yaml").initial_state() == {"generation_bt": 2, "generation_ll": 1}


def test_gpu_size_allows_other_temperatures():
    raw = _with(FUSED, size="gpu", inputs={"temperatures": [0.7, 1.3]})
    assert validate(raw, "m.yaml").inputs["temperatures"] == [0.7, 1.3]
