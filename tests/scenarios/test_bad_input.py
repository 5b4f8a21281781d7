"""Every bad input of issue 28 refused before any launch with exit 2, naming the file (and field or tensor) and the limit.

Each row of ``bad_input_attacks.ATTACKS`` is planted in a temporary directory
and run through ``harness.cli.main`` (the code path of ``python -m harness``);
a few representative rows run as real processes too, to show the exit code
and that no traceback reaches the user. A scenario row plants the bad file
beside a good scenario: ``list`` still lists the good one. ``validate`` with
a bad file in its root still runs the other scenarios and exits 2.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bad_input_attacks import ATTACKS, ROOT, _bomb, _scenario_root, env_for, run_process  # noqa: E402
from harness.cli import main as cli_main  # noqa: E402
from harness.wire.atomic_file import DirectoryNotWritable, writable_dir  # noqa: E402
from scenarios.data_files import MAX_ALIAS_NODES, load_yaml  # noqa: E402
from scenarios.fields import ScenarioError, describe  # noqa: E402

BY_ROW = {a.row: a for a in ATTACKS}


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.row for a in ATTACKS])
def test_each_attack_is_refused_with_exit_2_naming_file_and_limit(attack, tmp_path, capsys, monkeypatch):
    for key, value in env_for(attack).items():
        monkeypatch.setenv(key, value)
    code = cli_main(attack.plant(tmp_path))
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert code == 2, output
    assert re.search(attack.expect, output), output
    if attack.lists_good:
        assert "│ markov_sharded │ basic" in captured.out, "the good scenario beside the bad file is still listed"


@pytest.mark.parametrize("row", ["alias bomb in description", "FIFO", "truncated safetensors payload",
                                 "read-only run directory"])
def test_representative_attacks_as_real_processes_exit_2_without_traceback(row, tmp_path):
    done = run_process(BY_ROW[row], tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert re.search(BY_ROW[row].expect, output), output
    assert "Traceback" not in output


def test_validate_runs_the_good_scenarios_beside_a_bad_file_and_exits_2(tmp_path):
    root, bad = _scenario_root(tmp_path, "bad.yaml")
    bad.write_text(_bomb() + "name: bad\n")
    done = subprocess.run([sys.executable, "-m", "harness", "validate", "--launcher", "cpu", "--scenario-root",
                           str(root), "--world", "1", "--no-cache", "--no-store", "--run-dir", str(tmp_path / "run")],
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output
    assert re.search(r"scenario file refused, not run: \S+bad\.yaml: not valid YAML: aliases expand", output), output
    doc = json.loads((tmp_path / "run" / "report.json").read_text())
    assert [(r["case_id"], r["status"]) for r in doc["results"]] == [("markov_sharded/basic[world=1,launcher=cpu]",
                                                                        "pass")]
    # every file states the exit code the process returned and why
    summary = doc["summary"]
    assert summary["exit_code"] == 2 and re.match(r"INPUT REFUSED \(1 scenario file\(s\) refused, not run: \S+bad\.yaml",
                                                  summary["result"]), summary
    junit = (tmp_path / "run" / "report.xml").read_text()
    assert '<property name="exit_code" value="2"' in junit and "INPUT REFUSED (1 scenario file" in junit
    assert re.search(r"^# Result : INPUT REFUSED \(.*bad\.yaml.*\(exit 2, ", done.stdout, re.M), done.stdout
    assert "Traceback" not in output


def test_a_full_disk_under_the_run_directory_is_named(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(DirectoryNotWritable, match=rf"run directory {re.escape(str(tmp_path))}: cannot write: "
                                                   rf"No space left on device"):
        writable_dir(tmp_path, "run directory")
    assert list(tmp_path.iterdir()) == [], "the probe file is removed"


def test_aliases_within_the_bound_are_data_and_past_it_are_refused():
    shared = "base: &b {x: 1, y: [1, 2, 3]}\n" + "".join(f"k{i}: *b\n" for i in range(10))
    assert load_yaml(shared, "f.yaml")["k9"] == {"x": 1, "y": [1, 2, 3]}
    wide = "base: &b [" + ",".join(["1"] * 1000) + "]\n" + "".join(f"k{i}: *b\n" for i in range(MAX_ALIAS_NODES // 1000 + 1))
    with pytest.raises(ScenarioError, match=rf"f\.yaml: not valid YAML: aliases expand to more than {MAX_ALIAS_NODES}"):
        load_yaml(wide, "f.yaml")
    with pytest.raises(ScenarioError, match="an alias refers to a node that contains it"):
        load_yaml("x: &x [1, *x]\n", "f.yaml")


def test_describe_never_builds_the_whole_repr_of_a_huge_value():
    huge = ["a" * 10**6] * 10**5  # its repr would be 10^11 characters
    assert len(describe(huge)) <= 60
    assert describe(10**5000) == "an int of 16610 bits"
