"""The cpu launcher with real processes: torchrun + gloo + the golden per-rank system.

Uses the small scenarios under tests/harness/scenarios (a golden case at
worlds 1, 2, 4 and 8, an injected hang and an injected crash), short
deadlines, and checks after each run that no process of the run is left
(a /proc scan for the run directory in command lines).
"""

import json
import os
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.scale.memory import processes_mentioning
from harness.launch.load_scale import load_factor
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def harness(*args, run_dir, timeout=HANG_GUARD_S, env=None):
    """Run ``python -m harness`` with the test scenarios (``env``: this environment's changes); return the process."""
    cmd = [sys.executable, "-m", "harness", *args]
    if args[0] in ("validate", "replay"):
        cmd += ["--scenario-root", str(SCENARIOS), "--run-dir", str(run_dir)]
    if args[0] == "validate":
        cmd += ["--no-store"]  # the default startup allowance: scaled by the load
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})


def processes_of(run_dir) -> list[str]:
    """Command lines of live processes that mention ``run_dir`` (psutil-free /proc scan)."""
    return list(processes_mentioning(str(run_dir)).values())


def report(run_dir) -> dict:
    """The JSON report of a run."""
    return json.loads((Path(run_dir) / "report.json").read_text())


def test_golden_sharded_matches_unsharded_at_worlds_1_2_4_8(tmp_path):
    proc = harness("validate", "--launcher", "cpu", "--scenario", "tiny", "--world", "1", "2", "4", "8",
                   run_dir=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = report(tmp_path)
    got = sorted((r["world"], r["status"]) for r in doc["results"])
    assert got == [(1, "pass"), (2, "pass"), (4, "pass"), (8, "pass")]
    assert "launcher cpu" in doc["header"]
    suite = ET.parse(tmp_path / "report.xml").getroot().find("testsuite")
    assert len(suite.findall("testcase")) == 4 and suite.get("failures") == "0"
    assert "# Out of bounds values : 0 OK" in proc.stdout
    # per-rank logs through torchrun's --log-dir / --redirects
    assert list(tmp_path.glob("logs/job*/*/attempt_0/7/stderr.log"))
    assert processes_of(tmp_path) == []


def test_tp_groups_side_by_side(tmp_path):
    proc = harness("validate", "--launcher", "cpu", "--scenario", "tiny", "--world", "4", "--tp", "2",
                   run_dir=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = sorted((r["world"], r["group"], r["status"]) for r in report(tmp_path)["results"])
    assert got == [(2, 0, "pass"), (2, 1, "pass")]


def test_virtual_launcher_runs_ranks_as_threads(tmp_path):
    proc = harness("validate", "--launcher", "virtual", "--impl", "golden", "--scenario", "tiny", "--world", "4",
                   run_dir=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (res,) = report(tmp_path)["results"]
    assert (res["launcher"], res["world"], res["status"]) == ("virtual", 4, "pass")
    # the job ended by itself after its verdict: how long its process took to end is kept, in units.json too
    timing = json.loads((tmp_path / "timing" / "job0.json").read_text())
    after = timing["after_last_verdict_s"]
    assert 0 <= after <= timing["ended"] - timing["started"], timing
    (unit_doc,) = json.loads((tmp_path / "units.json").read_text())["units"]
    assert unit_doc["after_last_verdict_s"] == after
    assert "# Unit time : " in proc.stdout and "after the units' last verdicts" in proc.stdout


def test_a_reused_run_directory_never_lends_an_earlier_runs_files(tmp_path):
    """A second run in the same --run-dir (kept for its reference cache) judges only what it wrote itself."""
    cache = tmp_path / "cache"  # this test's own cache: the session's is shared with every other test
    for _ in range(2):
        proc = harness("validate", "--launcher", "virtual", "--impl", "golden", "--scenario", "tiny",
                       "--world", "2", run_dir=tmp_path / "run", env={"RANKCHECK_CACHE_DIR": str(cache)})
        assert proc.returncode == 0, proc.stdout + proc.stderr
    progress = (tmp_path / "run" / "cases").glob("*/w2/rank0.progress.jsonl")
    (path,) = list(progress)
    events = [json.loads(line)["event"] for line in path.read_text().splitlines()]
    assert events.count("start") == 1, events  # the first run's records were removed, not appended to
    assert list(cache.rglob("*.safetensors"))  # the cache itself is kept


def test_injected_hang_ends_in_time_naming_rank_and_launch(tmp_path):
    proc = harness("validate", "--launcher", "cpu", "--scenario", "tiny_hang", run_dir=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the scenario expects this timeout
    (res,) = report(tmp_path)["results"]
    assert res["status"] == "pass"
    assert (res["diagnosis"]["rank"], res["diagnosis"]["launch"]) == (1, 1)
    assert "rank 1 hung before launch 1" in res["detail"]
    # ended by its deadline (the job's own record), not by the hung rank or the test's timeout
    timing = json.loads(next((tmp_path / "timing").glob("job*.json")).read_text())
    assert timing["timed_out"] and [bool(v["expired"]) for v in timing["verdicts"]] == [True], timing
    assert processes_of(tmp_path) == []


def test_injected_crash_ends_naming_rank_and_launch(tmp_path):
    proc = harness("validate", "--launcher", "cpu", "--scenario", "tiny_crash", run_dir=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (res,) = report(tmp_path)["results"]
    assert res["status"] == "pass", res
    assert (res["diagnosis"]["rank"], res["diagnosis"]["launch"]) == (1, 2)
    assert processes_of(tmp_path) == []


def test_unexpected_hang_fails_and_replay_shows_ranks_side_by_side(tmp_path):
    proc = harness("replay", "tiny", "--world", "2", "--launcher", "cpu", "--deadline", f"{3 * load_factor():g}",
                   "--inject", "hang:rank=0,launch=2", run_dir=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (res,) = report(tmp_path)["results"]
    assert res["status"] == "timeout"
    assert "rank 0 hung before launch 2" in res["detail"]
    assert "rank 0" in proc.stdout and "rank 1" in proc.stdout and "hang L2" in proc.stdout
    assert "diagnosis: rank 0 hung before launch 2" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "# Result : FAILED"  # the verdict is the last line, after the diagnostics
    assert processes_of(tmp_path) == []


def free_port() -> int:
    """A free TCP port on the loopback address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_agents_one_rendezvous_run_as_two_nodes(tmp_path):
    endpoint = f"127.0.0.1:{free_port()}"
    procs = []
    for node in (0, 1):
        run_dir = tmp_path / f"node{node}"
        cmd = [sys.executable, "-m", "harness", "validate", "--launcher", "cpu", "--scenario", "tiny", "--world", "2",
               "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", endpoint, "--rdzv-id", "twonode", "--scenario-root", str(SCENARIOS),
               "--run-dir", str(run_dir), "--no-store"]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=HANG_GUARD_S)[0] for p in procs]
    for node, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, out
        # each node writes its own report, its node rank in the name
        (res,) = json.loads((tmp_path / f"node{node}" / f"report.node{node}.json").read_text())["results"]
        assert (res["world"], res["status"]) == (2, "pass"), res
    # each node wrote the result of its own rank; together they hold both ranks
    ranks = {p.name for node in (0, 1) for p in (tmp_path / f"node{node}").glob("cases/*/w2/rank*.result.json")}
    assert ranks == {"rank0.result.json", "rank1.result.json"}
    assert processes_of(tmp_path) == []


@pytest.mark.parametrize("args, needle", [
    (["validate", "--launcher", "cpu", "--world", "4", "--tp", "3"], "--tp 3 must divide --world 4"),
    (["validate", "--launcher", "cpu", "--scenario", "no_such_scenario"], "--scenario: no scenario named"),
    (["replay", "tiny", "--world", "3"], "--world: markov_sharded/tiny runs at"),
    (["replay", "tiny", "--inject", "hang:rank"], "--inject"),
])
def test_bad_arguments_are_named_before_anything_runs(tmp_path, capsys, args, needle):
    from harness.cli import main

    code = main([*args, "--scenario-root", str(SCENARIOS), "--run-dir", str(tmp_path)])
    assert code == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "jobs").exists()
