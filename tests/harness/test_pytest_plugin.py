"""The pytest plugin (``harness.pytest_plugin``), through real ``pytest`` processes as a user runs them.

Collection: one node id per scenario x world (x launcher when several),
only where the command line names a scenario root, never for the
scenario files under ``tests/``. Runs: the NaN scenarios at world 2 through
``pytest scenarios/ -k nan -n 2``; then a planted fault
(``planted_fault.ShardEdgeFault``, selected by
``$RANKCHECK_TEST_PLANTED_SYSTEM``, wrong on a NaN at a shard edge in a
call of 5 rows) in a scenario root of the test's own: ``validate`` and the
plugin give the same verdict per case, the plugin's JUnit names each case
once, and ``--lf -n 2`` reruns exactly the planted failure. ``-x``: two
scenario roots of the test's own, the first holding one case that fails (it
expects an error nothing raises); pytest stops after it with exit 1 and the
second root's cases are never started.
"""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from planted_fault import PLANTED

from harness.families import PLANTED_SYSTEM_VAR
from harness.families.catalog import discover
from harness.families.selection import KeywordExpression, case_words

REPO = Path(__file__).resolve().parents[2]
TEST_SCENARIOS = Path(__file__).resolve().parent / "scenarios"
RUN_DEADLINE_S = 500
# A NaN on every shard edge in one call of 5 rows: at world 2 the planted fault changes a draft token, at world 1
# there is no shard edge and it is the golden's bits.
EDGE_NAN = """\
name: edge_nan
family: markov_sharded
description: harness test - NaN on every shard edge in a call of 5 rows (what planted_fault.ShardEdgeFault corrupts)
seed: 7004
worlds: [1, 2]
size: cpu
config: {vocab: 1024, steps: 2, max_rows: 8, max_reqs: 8}
inputs: {temperatures: [0.0, 1.0]}
calls:
  - {rows: 5}
inject:
  - kind: nan_logits
    positions:
      - {row: 0, step: 0, vocab: shard_edges}
expect: {outcome: golden}
"""


# Expects an error that no rank raises (nothing is injected): the case runs and fails.
WRONG_EXPECT = """\
name: wrong_expect
family: markov_sharded
description: harness test - expects an error no rank raises (nothing is injected), so the case fails
seed: 7005
worlds: [1]
size: cpu
config: {vocab: 1024, steps: 2, max_rows: 8, max_reqs: 8}
calls:
  - {rows: 2}
expect: {outcome: error, error: {type: RuntimeError, match: "an error nothing raises"}}
"""


def run(args, cwd, **env):
    """Run ``python <args>`` in ``cwd`` with the repository importable (and ``env`` added); the finished process."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    environ.update(PYTHONPATH=str(REPO), COLUMNS="250", **env)  # wide enough for pytest's one-line summaries
    return subprocess.run([sys.executable, *args], cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=RUN_DEADLINE_S)


def node_ids(output):
    """The node ids ``pytest --co -q`` printed."""
    return [line for line in output.splitlines() if "::" in line]


def junit_cases(path):
    """(classname, name) -> outcome (passed, failure, error, skipped) and the failure's message, of a JUnit file."""
    cases = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = next(((child.tag, child.get("message", "")) for child in case
                        if child.tag in ("failure", "error", "skipped")), ("passed", ""))
        assert (case.get("classname"), case.get("name")) not in cases, "two testcases share a name"
        cases[(case.get("classname"), case.get("name"))] = outcome
    return cases


def case_statuses(report):
    """case id -> status of the cases (not the stored-bits checks) of a harness JSON report."""
    doc = json.loads(Path(report).read_text())
    return {r["case_id"]: r["status"] for r in doc["results"] if r["launcher"] != "store"}


def test_the_plugin_collects_one_node_id_per_scenario_world_matching_k():
    done = run(["-m", "pytest", "scenarios/", "-k", "nan", "--co", "-q", "-p", "no:cacheprovider"], REPO)
    expression = KeywordExpression("nan")
    expected = {f"scenarios/{c.family}/{Path(c.path).name}::world={w}" for c in discover() for w in c.worlds
                if expression.matches(case_words(c, w, "cpu"))}
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(node_ids(done.stdout)) == sorted(expected)
    assert "scenarios/markov_sharded/nan_logits.yaml::world=4" in expected


def test_several_launchers_suffix_the_ids_and_tests_scenario_files_are_never_collected():
    done = run(["-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "tests/harness/scenarios",
                "scenarios/markov_sharded/nan_logits.yaml", "--rankcheck-launcher", "cpu",
                "--rankcheck-launcher", "virtual"], REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert node_ids(done.stdout) == [f"scenarios/markov_sharded/nan_logits.yaml::world={w}[{launcher}]"
                                     for w in (1, 2, 4) for launcher in ("cpu", "virtual")]


def test_a_scenario_root_given_by_option_is_collected_and_tests_alone_collects_nothing():
    alone = run(["-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "tests/harness/scenarios"], REPO)
    assert alone.returncode == 5 and node_ids(alone.stdout) == []  # pytest's "no tests collected"
    named = run(["-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "--rankcheck-scenario-root",
                 "tests/harness/scenarios", "tests/harness/scenarios", "-k", "tiny_hang or tiny_crash"], REPO)
    assert node_ids(named.stdout) == ["tests/harness/scenarios/markov_sharded/tiny_crash.yaml::world=2",
                                      "tests/harness/scenarios/markov_sharded/tiny_hang.yaml::world=2"]


@pytest.mark.slow
def test_pytest_k_nan_n_2_runs_the_nan_scenarios_through_the_harness(tmp_path):
    done = run(["-m", "pytest", "scenarios/", "-k", "nan", "-n", "2", "--rankcheck-world", "2", "-p",
                "no:cacheprovider", "--rankcheck-run-dir", str(tmp_path / "run"), "--junitxml",
                str(tmp_path / "junit.xml")], REPO)
    nan_at_2 = [c for c in discover() if "nan" in c.name and 2 in c.worlds]
    cpu = [c for c in nan_at_2 if c.size == "cpu"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(cpu)} passed, {len(nan_at_2) - len(cpu)} skipped" in done.stdout
    assert case_statuses(tmp_path / "run" / "report.json") == {
        f"{c.key}[world=2,launcher=cpu]": "pass" for c in cpu}
    outcomes = junit_cases(tmp_path / "junit.xml")
    assert {k: v[0] for k, v in outcomes.items()} == {
        (f"scenarios.{c.family}.{Path(c.path).name}", "world=2"): "passed" if c.size == "cpu" else "skipped"
        for c in nan_at_2}


def planted_root(tmp_path):
    """A scenario root holding ``edge_nan`` alone: one case that passes (world 1) and one the planted fault fails."""
    root = tmp_path / "scn" / "markov_sharded"
    root.mkdir(parents=True)
    (root / "edge_nan.yaml").write_text(EDGE_NAN)
    return root.parent


@pytest.mark.slow
def test_validate_and_the_plugin_agree_and_lf_reruns_exactly_the_planted_failure(tmp_path):
    root = planted_root(tmp_path)
    planted = {PLANTED_SYSTEM_VAR: PLANTED}
    plugin = ["-m", "pytest", "-p", "harness.pytest_plugin", "--rankcheck-scenario-root", "scn", "scn",
              "--rankcheck-launcher", "cpu", "--rankcheck-world", "1", "--rankcheck-world", "2"]
    # validate and the plugin's first run are independent (run directories of their own): side by side
    with ThreadPoolExecutor(1) as beside:
        validating = beside.submit(run, ["-m", "harness", "validate", "--launcher", "cpu", "--scenario-root", str(root),
                                         "--world", "1", "2", "--run-dir", str(tmp_path / "validate")],
                                   tmp_path, **planted)
        first = run([*plugin, "--rankcheck-run-dir", "first", "--junitxml", "first.xml"], tmp_path, **planted)
        validated = validating.result()
    failed = "markov_sharded/edge_nan[world=2,launcher=cpu]"
    assert validated.returncode == 1, validated.stdout + validated.stderr
    assert first.returncode == 1, first.stdout + first.stderr
    assert case_statuses(tmp_path / "validate" / "report.json") == case_statuses(tmp_path / "first" / "report.json")
    assert case_statuses(tmp_path / "first" / "report.json") == {
        failed: "fail", "markov_sharded/edge_nan[world=1,launcher=cpu]": "pass"}
    first_cases = junit_cases(tmp_path / "first.xml")
    assert {k: v[0] for k, v in first_cases.items()} == {
        ("scn.markov_sharded.edge_nan.yaml", "world=1"): "passed",
        ("scn.markov_sharded.edge_nan.yaml", "world=2"): "failure"}
    assert f"FAILED scn/markov_sharded/edge_nan.yaml::world=2 - Failed: FAIL {failed}: rank 0, launch 0, " \
           f"draft_tokens[row 0, step 0]" in first.stdout
    again = run([*plugin, "--lf", "-n", "2", "--rankcheck-run-dir", "again", "--junitxml", "again.xml"], tmp_path,
                **planted)
    assert again.returncode == 1, again.stdout + again.stderr
    again_cases = junit_cases(tmp_path / "again.xml")
    assert list(again_cases) == [("scn.markov_sharded.edge_nan.yaml", "world=2")]
    assert again_cases[("scn.markov_sharded.edge_nan.yaml", "world=2")][0] == "failure"
    assert "draft_tokens[row 0, step 0]" in again_cases[("scn.markov_sharded.edge_nan.yaml", "world=2")][1]
    assert case_statuses(tmp_path / "again" / "report.json") == {failed: "fail"}


def test_x_stops_after_the_first_failure_with_exit_1_and_starts_nothing_more(tmp_path):
    failing = tmp_path / "a_fail" / "markov_sharded"
    rest = tmp_path / "b_rest" / "markov_sharded"
    failing.mkdir(parents=True)
    rest.mkdir(parents=True)
    (failing / "wrong_expect.yaml").write_text(WRONG_EXPECT)
    (rest / "tiny.yaml").write_text((TEST_SCENARIOS / "markov_sharded" / "tiny.yaml").read_text())
    done = run(["-m", "pytest", "-x", "-p", "harness.pytest_plugin", "-p", "no:cacheprovider",
                "--rankcheck-scenario-root", "a_fail", "--rankcheck-scenario-root", "b_rest", "a_fail", "b_rest",
                "--rankcheck-launcher", "cpu", "--rankcheck-world", "1", "--rankcheck-world", "2",
                "--rankcheck-run-dir", "run", "--junitxml", "x.xml"], tmp_path)
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "stopping after 1 failures" in output and "1 failed" in output and "passed" not in output, output
    # one harness run per scenario root, in the order of the roots: the first fails, the second never starts
    assert case_statuses(tmp_path / "run" / "cpu-0" / "report.json") == {
        "markov_sharded/wrong_expect[world=1,launcher=cpu]": "fail"}
    assert not (tmp_path / "run" / "cpu-1").exists(), sorted(p.name for p in (tmp_path / "run").iterdir())
    assert {k: v[0] for k, v in junit_cases(tmp_path / "x.xml").items()} == {
        ("a_fail.markov_sharded.wrong_expect.yaml", "world=1"): "failure"}
