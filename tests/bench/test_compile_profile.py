"""harness/bench/compile_profile.py on the CPU: the smallest family (HeadGemv at dim 256) measured in its three
cases, each a fresh process (about 5 s each, three of them: marked slow): compiled without artifacts, compiled
and stored into an empty directory, then loaded from it with nothing compiled."""

import json

import pytest

from harness.bench import compile_profile


@pytest.mark.slow
def test_the_three_cases_of_the_head_family(tmp_path, capsys):
    artifacts = tmp_path / "kernels"
    assert compile_profile.main(["--family", "head", "--artifacts", str(artifacts)]) == 0
    out = capsys.readouterr().out
    rows = {row["case"]: row for row in map(json.loads, [line for line in out.splitlines() if line.startswith("{")])}
    assert list(rows) == list(compile_profile.CASES)
    compiled, first, later = (rows[case]["seconds"] for case in compile_profile.CASES)
    assert compiled["lower"] > 0 and compiled["trace"] > 0 and compiled["load (clock)"] == 0
    assert first["compile (clock)"] > 0 and first["load (clock)"] > 0  # compiled, stored, loaded back
    assert later["compile (clock)"] == 0 and "lower" not in later and later["load (clock)"] > 0
    assert sorted(p.suffix for p in artifacts.rglob("*") if p.is_file()) == [".kernel"]
    assert "| head | later | 1 |" in out
