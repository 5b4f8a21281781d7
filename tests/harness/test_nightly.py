"""The multi-node nightly job as README writes it: the world from the node options, per-node reports, the merge.

The unit tests check the planning (``plan_worlds`` with torchrun's node
options and ``--tp``), the per-node names and groups (``Rendezvous``) and
the merge (``harness.reports.merge``) on reports written by the real
``Report``. The process test takes README's nightly script, replaces the
scheduler's variables (2 nodes of 2 processes on this host, a c10d
rendezvous on localhost with a free port, ``--tp`` scaled as README scales
it to ``--nproc-per-node``) and swaps only the launcher (``cpu``: the golden
implementation over torchrun + gloo) and adds a two-scenario selection; it
starts both agents (node 1 first, so that c10d meets the agents out of
node order), merges with README's merge line and checks the merged report.
The store test runs the same line with node 0's harness holding the job's
store and node 1's agent planted slow to shut its rendezvous down
(``planted_agent``): the store must outlive it. Every wait has a deadline; the teardown ends every process tree the test
started (``harness.launch.supervision.Supervised``), verified gone.
"""

import io
import json
import re
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.cli import main
from harness.launch.torchrun_options import Rendezvous
from harness.reports.merge import run_merge
from harness.reports.report import Report
from harness.wire.case_result import CaseResult
from harness.validate import ValidateRequest, plan_worlds
from harness.scale.measure import world_costs
from harness.scale.nightly import free_ports, one_host_env, run_agents
from harness.launch.supervision import Supervised
from harness.launch.load_scale import load_factor
from harness.launch.torchrun_agent import PLANTED_AGENT_VAR
from planted_agent import PLANTED_SLOW_AGENT, WAITS_FOR_VAR
from test_cpu_launcher import free_port, processes_of
from hang_guard import HANG_GUARD_S

ROOT = Path(__file__).resolve().parents[2]
# Two cheap cpu scenarios of two families, both listing TP size 2.
SCENARIOS = ["markov_sharded/basic", "allreduce_mhc/basic_ll"]
AGENT_DEADLINE_S = 240
NODES_HERE, PER_NODE_HERE = 2, 2


def fake_case(key: str, worlds) -> SimpleNamespace:
    """A stand-in for a catalog Case with what planning reads (key, worlds)."""
    family, name = key.split("/")
    return SimpleNamespace(key=key, family=family, name=name, worlds=tuple(worlds))


def nodes(nnodes=2, per_node=2, rank=0) -> Rendezvous:
    """Torchrun's node options of one node of a job."""
    return Rendezvous(nnodes=nnodes, node_rank=rank, nproc_per_node=per_node, endpoint="h:1", id="job")


# -- planning

def test_the_node_options_give_the_world_and_tp_splits_it():
    cases = [fake_case("f/at_tp", [2, 4]), fake_case("f/other", [1, 8])]
    plan = plan_worlds(cases, ValidateRequest(tp=2, rendezvous=nodes(2, 2)))
    assert [(w, [c.key for c in cs]) for w, cs in plan] == [(4, ["f/at_tp"])]
    assert "skipped 1 scenario(s)" in plan.skipped and "f/other" in plan.skipped and "tp 2" in plan.skipped
    assert plan.why_empty == ""


def test_without_tp_the_node_options_plan_their_world_only():
    cases = [fake_case("f/a", [2, 4]), fake_case("f/b", [2])]
    plan = plan_worlds(cases, ValidateRequest(rendezvous=nodes(2, 2)))
    assert [(w, [c.key for c in cs]) for w, cs in plan] == [(4, ["f/a"])]
    assert "f/b" in plan.skipped


def test_nothing_at_the_tp_size_says_why_in_words():
    plan = plan_worlds([fake_case("f/a", [1, 2])], ValidateRequest(tp=4, rendezvous=nodes(18, 4)))
    assert sum(len(cs) for _, cs in plan) == 0
    assert "tp 4" in plan.why_empty and "world 72" in plan.why_empty and "[1, 2]" in plan.why_empty


@pytest.mark.parametrize("req, needle", [
    (ValidateRequest(tp=2, worlds=[8], rendezvous=nodes(2, 2)), "--world 8 contradicts --nnodes 2 x --nproc-per-node 2"),
    (ValidateRequest(rendezvous=Rendezvous(nnodes=2)), "--nnodes 2 needs --nproc-per-node"),
    (ValidateRequest(tp=3, rendezvous=nodes(2, 2)), "--tp 3 must divide --world 4"),
    (ValidateRequest(tp=2, rendezvous=nodes(2, 2, rank=2)), "--node-rank 2: expected 0..1"),
    (ValidateRequest(tp=4, scenarios=["f/a"], rendezvous=nodes(2, 2)), "--tp: f/a runs at [1, 2]"),
])
def test_plans_the_node_options_cannot_run_are_refused_naming_the_options(req, needle):
    with pytest.raises(ValueError, match=re.escape(needle)):
        plan_worlds([fake_case("f/a", [1, 2])], req)


# -- per-node names and groups

def test_a_node_of_many_names_its_files_and_reports_only_its_groups():
    node3 = nodes(4, 2, rank=3)
    assert node3.node_path("/shared/J.xml") == "/shared/J.node3.xml"
    assert node3.node_path(Path("runs/x/report.json")) == "runs/x/report.node3.json"
    assert Rendezvous().node_path("/shared/J.xml") == "/shared/J.xml"
    assert node3.local_groups(8, 2) == [3]            # ranks 6, 7: group 3 only
    assert nodes(2, 4, rank=1).local_groups(8, 2) == [2, 3]
    assert nodes(2, 2, rank=1).local_groups(4, 4) == [None]  # one group over both nodes
    assert nodes(4, 2, rank=1).local_groups(8, 4) == [0]     # ranks 2, 3 of group 0 (ranks 0-3)
    assert node3.describe()["rank"] == 3 and node3.describe()["nnodes"] == 4
    # the workers number themselves from here, whatever order c10d met the agents in
    assert node3.first_rank(8) == 6 and Rendezvous().first_rank(8) is None


# -- merging

def result(scenario="basic", status="pass", group=0, world=2, **kw) -> CaseResult:
    """A verdict as a node reports it."""
    return CaseResult("markov_sharded", scenario, world, "cpu", status, group=group, **kw)


def node_report(directory: Path, rank: int, results, *, nnodes=2, rdzv_id="job", planned=None,
                interrupted=False) -> Path:
    """Write node ``rank``'s JSON report (the real Report's format) and return its path."""
    path = directory / f"J.node{rank}.json"
    rdzv = Rendezvous(nnodes=nnodes, node_rank=rank, nproc_per_node=2, id=rdzv_id)
    with Report(header=f"# node {rank}", json_path=path, stream=io.StringIO(), live=False, total=planned,
                provenance={"node": rdzv.describe()}) as report:
        for r in results:
            report.add(r)
        report.interrupted = interrupted
    return path


def merged(tmp_path, *inputs, **kw) -> tuple[int, dict, ET.Element]:
    """Merge ``inputs`` into tmp_path/M.json and M.xml; (exit code, JSON document, JUnit testsuite)."""
    code = run_merge([str(p) for p in inputs], junit=str(tmp_path / "M.xml"), json_path=str(tmp_path / "M.json"),
                     stream=io.StringIO(), **kw)
    doc = json.loads((tmp_path / "M.json").read_text())
    return code, doc, ET.parse(tmp_path / "M.xml").getroot().find("testsuite")


def test_nodes_of_their_own_groups_merge_into_every_case_once_with_its_node(tmp_path):
    a = node_report(tmp_path, 0, [result("basic", group=0), result("other", group=0)])
    b = node_report(tmp_path, 1, [result("basic", group=1), result("other", group=1)])
    code, doc, suite = merged(tmp_path, tmp_path / "J.node*.json")  # a glob, as README's merge line gives it
    assert code == 0
    got = sorted((r["scenario"], r["group"], r["status"], [n["node"] for n in r["nodes"]]) for r in doc["results"])
    assert got == [("basic", 0, "pass", [0]), ("basic", 1, "pass", [1]), ("other", 0, "pass", [0]),
                   ("other", 1, "pass", [1])]
    assert {n["source"] for r in doc["results"] for n in r["nodes"]} == {str(a.resolve()), str(b.resolve())}
    assert suite.get("tests") == "4" and suite.get("failures") == "0"
    assert set(doc["provenance"]["nodes"]) == {"0", "1"}
    assert doc["summary"]["planned"] is None  # the nodes gave no planned counts: none is made up


def test_nodes_cut_short_together_leave_the_job_interrupted_not_green(tmp_path):
    """The scheduler's time limit stops every node at once: their reports agree, and still the job did not finish."""
    a = node_report(tmp_path, 0, [result(group=0)], planned=3, interrupted=True)
    b = node_report(tmp_path, 1, [result(group=1)], planned=3, interrupted=True)
    code, doc, _ = merged(tmp_path, a, b)
    assert code == 130
    assert doc["summary"]["result"].startswith("INTERRUPTED (2 of 6 run")


def test_a_group_over_two_nodes_becomes_one_verdict_the_worst(tmp_path):
    a = node_report(tmp_path, 0, [result(group=None, world=4, detail="bits equal on the 2 of 4 ranks")])
    b = node_report(tmp_path, 1, [result(group=None, world=4, status="fail", mismatch_count=3,
                                         first_mismatch="rank 2, tokens[0] differs")])
    code, doc, suite = merged(tmp_path, a, b)
    assert code == 1
    (r,) = doc["results"]
    assert (r["status"], r["mismatch_count"], [n["status"] for n in r["nodes"]]) == ("fail", 3, ["pass", "fail"])
    assert "node 0 (pass)" in r["detail"] and "node 1 (fail): rank 2, tokens[0] differs" in r["detail"]
    assert suite.get("failures") == "1"


def test_a_missing_node_or_a_report_that_stops_short_is_an_error(tmp_path):
    a = node_report(tmp_path, 0, [result("basic", group=0), result("later", group=0)])
    b = node_report(tmp_path, 1, [result("basic", group=1)])  # node 1 ended before "later"
    code, doc, _ = merged(tmp_path, a, b)
    assert code == 1
    (absent,) = [r for r in doc["results"] if r["status"] == "error"]
    assert absent["scenario"] == "later" and "node 1 has no verdict" in absent["detail"]

    code, doc, _ = merged(tmp_path, a)
    assert code == 1
    assert any("node 1 of 2: no report" in r["detail"] for r in doc["results"])


def test_a_nodes_own_job_error_is_its_alone_and_fails_the_merge(tmp_path):
    """A node whose agent was ended in its shutdown reports an error of family ``job`` (``harness.launch.jobs``):
    the merge keeps it, fails on it, and does not ask the other nodes for it."""
    stuck = CaseResult("job", "node1:job0:agent-shutdown", 2, "cpu", "error", detail="stuck agent shutdown: ...")
    a = node_report(tmp_path, 0, [result(group=0)])
    b = node_report(tmp_path, 1, [result(group=1), stuck])
    code, doc, _ = merged(tmp_path, a, b)
    assert code == 1
    errors = [(r["family"], r["scenario"], [n["node"] for n in r["nodes"]]) for r in doc["results"]
              if r["status"] == "error"]
    assert errors == [("job", "node1:job0:agent-shutdown", [1])]


def test_exit_codes_follow_the_single_run_rule(tmp_path):
    unavailable = node_report(tmp_path, 0, [result(status="not-available", detail="no GPU")], nnodes=1)
    assert merged(tmp_path, unavailable)[0] == 3
    assert merged(tmp_path, unavailable, allow_unavailable=True)[0] == 0
    empty = node_report(tmp_path, 0, [], nnodes=1)
    assert merged(tmp_path, empty)[0] == 2


@pytest.mark.parametrize("second, needle", [
    (lambda d: node_report(d / "again", 0, [result()]), "two reports of node 0"),
    (lambda d: node_report(d, 1, [result(group=1)], rdzv_id="other-job"), "different jobs"),
])
def test_inputs_that_cannot_be_one_job_are_refused_naming_the_files(tmp_path, capsys, second, needle):
    first = node_report(tmp_path, 0, [result()])
    (tmp_path / "again").mkdir()
    other = second(tmp_path)
    code = main(["merge-reports", "--json", str(tmp_path / "M.json"), str(first), str(other)])
    assert code == 2
    err = capsys.readouterr().err
    assert needle in err and str(other) in err
    assert not (tmp_path / "M.json").exists()


def test_a_directory_input_skips_the_outputs_and_earlier_merges(tmp_path):
    node_report(tmp_path, 0, [result(group=0)])
    node_report(tmp_path, 1, [result(group=1)])
    for _ in range(2):  # the second merge finds the first one's M.json in the directory
        code, doc, _ = merged(tmp_path, tmp_path)
        assert code == 0 and len(doc["results"]) == 2
    (tmp_path / "M.json").rename(tmp_path / "earlier.json")
    code, doc, _ = merged(tmp_path, tmp_path)
    assert code == 0 and len(doc["results"]) == 2


# -- README's nightly job, two agents on this host

def readme_nightly_lines() -> list[str]:
    """The harness commands of README's nightly script (continuation lines joined), in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The nightly job (many nodes)", 1)[1]
    script = section.split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in script.replace("\\\n", " ").splitlines() if re.match(r"(srun )?rankcheck ", line)]


def as_here(line: str, *, node: int, endpoint: str, out_dir: Path, nodes: int = NODES_HERE,
            per_node_here: int = PER_NODE_HERE) -> list[str]:
    """A README command with the scheduler's variables, the node shape and the launcher replaced for this host."""
    for name, value in {"$SLURM_NNODES": str(nodes), "$SLURM_NODEID": str(node), "$head:29500": endpoint,
                        "$SLURM_JOB_ID": "nightly", "/shared/rankcheck": str(out_dir)}.items():
        line = line.replace(name, value)
    assert "$" not in line, f"README's nightly command uses a variable this test does not set: {line}"
    argv = shlex.split(line)
    if argv[0] == "srun":
        argv = argv[1:]
    assert argv[0] == "rankcheck", argv
    argv[:1] = [sys.executable, "-m", "harness"]  # the venv's rankcheck: this interpreter's harness
    if "--nproc-per-node" in argv:
        i, t = argv.index("--nproc-per-node") + 1, argv.index("--tp") + 1
        per_node, tp = int(argv[i]), int(argv[t])
        # keep README's shape (TP groups of tp / per_node nodes' worth of ranks) at this host's size
        argv[i], argv[t] = str(per_node_here), str(per_node_here * tp // per_node)
        argv[argv.index("--launcher") + 1] = "cpu"
    return argv


def wait_for_torchrun(run_dir: Path, *, deadline_s: float) -> None:
    """Return once a torchrun agent of ``run_dir`` runs; fail after ``deadline_s`` seconds."""
    deadline = time.monotonic() + deadline_s
    while not any("torch.distributed.run" in cmd for cmd in processes_of(run_dir)):
        assert time.monotonic() < deadline, f"no torchrun agent of {run_dir} within {deadline_s} s"
        time.sleep(0.1)


@pytest.fixture
def agents():
    """A list of the test's agent trees (``Supervised``); the teardown ends every process of each, verified gone."""
    trees: list[Supervised] = []
    yield trees
    for tree in trees:
        tree.end_all()


def test_readme_nightly_job_on_two_agents_merges_into_one_green_report(tmp_path, agents):
    validate_line, merge_line = readme_nightly_lines()
    assert validate_line.startswith("srun ") and "merge-reports" in merge_line
    endpoint = f"127.0.0.1:{free_port()}"
    logs = []
    # The last node starts first, so its torchrun agent has the lower pid and c10d (which orders agents by
    # host, then pid) meets it as its rank 0: the harness must still give node k ranks k*2 and k*2 + 1.
    for node in reversed(range(NODES_HERE)):
        argv = as_here(validate_line, node=node, endpoint=endpoint, out_dir=tmp_path)
        argv += ["--scenario", *SCENARIOS, "--run-dir", str(tmp_path / f"run{node}")]
        logs.append(open(tmp_path / f"agent{node}.log", "w"))
        agents.append(Supervised(argv, cwd=str(ROOT), stdout=logs[-1], stderr=subprocess.STDOUT))
        wait_for_torchrun(tmp_path / f"run{node}", deadline_s=HANG_GUARD_S)
    # both agents run meanwhile; each wait is bounded by the agent's own clock, started at about the same time
    outcomes = [tree.wait(AGENT_DEADLINE_S) for tree in agents]
    for log in logs:
        log.close()
    outputs = [(tmp_path / f"agent{node}.log").read_text() for node in range(NODES_HERE)]
    codes = [(o.returncode, o.timed_out, o.leftovers) for o in outcomes]
    assert codes == [(0, False, [])] * NODES_HERE, outputs
    for node in range(NODES_HERE):
        assert (tmp_path / f"nightly.node{node}.json").is_file() and (tmp_path / f"nightly.node{node}.xml").is_file()
    assert not (tmp_path / "nightly.json").exists()  # no node wrote the job's name: each wrote its own

    merge = subprocess.run(as_here(merge_line, node=0, endpoint=endpoint, out_dir=tmp_path), cwd=ROOT,
                           capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert merge.returncode == 0, merge.stdout + merge.stderr
    doc = json.loads((tmp_path / "nightly.json").read_text())
    cases = [r for r in doc["results"] if r["launcher"] == "cpu"]
    keys = [(r["family"], r["scenario"], r["world"], r["launcher"], r["group"]) for r in doc["results"]]
    assert len(keys) == len(set(keys))  # no duplicate
    groups = NODES_HERE * PER_NODE_HERE // cases[0]["world"]
    assert sorted((f"{r['family']}/{r['scenario']}", r["group"]) for r in cases) == sorted(
        (s, g) for s in SCENARIOS for g in range(groups))
    assert all(r["status"] == "pass" for r in doc["results"]), doc["results"]
    # a group lies on one node here (README's shape): its verdict comes from that node
    assert {r["group"]: [n["node"] for n in r["nodes"]] for r in cases} == {g: [g] for g in range(groups)}
    suites = ET.parse(tmp_path / "nightly.xml").getroot().findall("testsuite")
    assert int(suites[0].get("tests")) == len(cases)  # the cases; the stored-bits checks are a suite of their own
    assert sum(int(s.get("tests")) for s in suites) == len(doc["results"])
    assert all(s.get("failures") == s.get("errors") == "0" for s in suites)
    assert processes_of(tmp_path) == []


def listening(port: int) -> bool:
    """Whether a socket of this host listens on TCP ``port`` (``/proc/net/tcp`` and ``tcp6``)."""
    rows = [line.split() for name in ("tcp", "tcp6") for line in
            Path(f"/proc/net/{name}").read_text().splitlines()[1:]]
    return any(row[1].endswith(f":{port:04X}") and row[3] == "0A" for row in rows)


def test_the_job_store_outlives_an_agent_slow_to_shut_down_after_the_holders_node_finished(tmp_path, agents):
    """README's nightly on two agents of 2 processes; node 0's harness holds the job's store, node 1's agent is
    planted slow to shut its rendezvous down (``planted_agent``): it does so only once node 0's run has ended (its
    report says so), the order that left a traceback in a healthy node's log (issue 40).

    Node 0 starts alone and its harness binds the store before starting its agent (the port listens before node 1
    starts: node 0 holds it). The store must answer node 1's agent to the end, and no harness may signal an agent
    past torchrun's exit barrier (it used to, a grace period after every node was done, in the middle of node 1's
    shutdown when the machine was loaded): neither node's job log holds a traceback, a RendezvousConnectionError or
    an agent "ended by" a signal, both exit codes are 0 and every verdict is a pass."""
    validate_line, _ = readme_nightly_lines()
    port = free_ports()
    holder_ended = tmp_path / "nightly.node0.json"
    planted = {PLANTED_AGENT_VAR: PLANTED_SLOW_AGENT, WAITS_FOR_VAR: str(holder_ended)}
    logs = []
    for node in range(NODES_HERE):
        argv = as_here(validate_line, node=node, endpoint=f"127.0.0.1:{port}", out_dir=tmp_path)
        argv += ["--scenario", SCENARIOS[0], "--run-dir", str(tmp_path / f"run{node}")]
        logs.append(open(tmp_path / f"agent{node}.log", "w"))
        env = one_host_env(NODES_HERE * PER_NODE_HERE, **(planted if node == 1 else {}))
        agents.append(Supervised(argv, env=env, cwd=str(ROOT), stdout=logs[-1], stderr=subprocess.STDOUT))
        wait_for_torchrun(tmp_path / f"run{node}", deadline_s=HANG_GUARD_S)
        assert listening(port), f"node {node}'s harness started its agent with no store at port {port}"
    outcomes = [tree.wait(AGENT_DEADLINE_S) for tree in agents]
    for log in logs:
        log.close()
    outputs = [(tmp_path / f"agent{node}.log").read_text() for node in range(NODES_HERE)]
    job_logs = [(tmp_path / f"run{node}" / "logs" / f"job0.node{node}.log").read_text() for node in range(NODES_HERE)]
    assert [(o.returncode, o.timed_out, o.leftovers) for o in outcomes] == [(0, False, [])] * NODES_HERE, outputs
    # the planted order happened: node 1's agent shut its rendezvous down after node 0's run had ended
    assert f"s for {holder_ended} (found)" in job_logs[1], job_logs[1]
    assert [("Traceback" in text, "RendezvousConnectionError" in text, "ended by" in text,
             "stuck agent shutdown" in text) for text in job_logs] == [(False, False, False, False)] * NODES_HERE, job_logs
    for node in range(NODES_HERE):
        doc = json.loads((tmp_path / f"nightly.node{node}.json").read_text())
        cases = [r for r in doc["results"] if r["launcher"] == "cpu"]
        assert [(r["group"], r["status"]) for r in cases] == [(node, "pass")], doc["results"]
    assert processes_of(tmp_path) == []


# -- README's nightly job with one bad TP group: 2 agents of 4 processes on this host

HANG_NODES, HANG_PER_NODE, HANG_GROUP, QUIET_HANG_DEADLINE_S = 2, 4, 1, 10


def test_a_hang_in_one_group_of_the_nightly_is_named_there_and_the_other_groups_keep_their_verdicts(tmp_path):
    """README's nightly at 2 agents of 4 processes (8 ranks, ``--tp 4``: 2 groups, one per node) on this host.

    The fewest nodes where a healthy group keeps its verdict beside the bad
    one: node 0 (the endpoint's, whose harness holds the job's store)
    passes, node 1's group hangs (its rank 1 is global rank 5). On 2 cores
    this takes about 30 s (each process start costs about 2 s of CPU,
    torch's import; the job is the planted hang's alone; the same checks at
    8 agents of 4, 32 ranks, took 70 to 90 s, at 3 agents 40 s). A hang is
    planted in group 1 (node 1) with README's arguments plus ``--inject``;
    the bad group must be named within its per-launch deadline plus as much
    again, the other group must pass, every process must be gone, and the
    merged report must lead with the bad group's diagnosis. The deadline
    is 10 s on a quiet host, times the load per core at the start as the
    harness scales its own defaults (``harness.launch.load_scale``): with
    another ``make test`` beside this one on 2 cores (load 5.7 per core), a
    healthy group's launch took over 10 s and timed out."""
    hang_deadline_s = QUIET_HANG_DEADLINE_S * load_factor()
    validate_line, merge_line = readme_nightly_lines()
    endpoint = f"127.0.0.1:{free_ports()}"
    inject = f"markov_sharded/basic:hang:rank=1,launch=1,group={HANG_GROUP}"
    here = {"endpoint": endpoint, "out_dir": tmp_path, "nodes": HANG_NODES, "per_node_here": HANG_PER_NODE}
    argvs = [as_here(validate_line, node=node, **here) +
             ["--scenario", "markov_sharded/basic", "--inject", inject, "--deadline", f"{hang_deadline_s:g}",
              "--run-dir", str(tmp_path / f"run{node}")] for node in range(HANG_NODES)]
    assert argvs[0][argvs[0].index("--tp") + 1] == "4"  # README's TP size, unscaled
    # the simulated nodes share this host's cores (a real node's share would oversubscribe them twice)
    env = one_host_env(HANG_PER_NODE * HANG_NODES)
    agents = run_agents(argvs, tmp_path, deadline_s=AGENT_DEADLINE_S + 6 * hang_deadline_s, env=env)
    logs = [(tmp_path / f"agent{node}.log").read_text()[-3000:] for node in range(HANG_NODES)]
    assert (agents.timed_out, agents.leftovers) == (False, []), logs
    # exit codes tell the truth: the bad node failed, the others passed
    assert agents.returncodes == {node: int(node == HANG_GROUP) for node in range(HANG_NODES)}, logs
    assert processes_of(tmp_path) == []
    # the healthy nodes' job logs, whose agents the harness ended in torchrun's exit barrier: no traceback
    healthy = {node: (tmp_path / f"run{node}" / "logs" / f"job0.node{node}.log").read_text()
               for node in range(HANG_NODES) if node != HANG_GROUP}
    assert {node: "Traceback" in text for node, text in healthy.items()} == dict.fromkeys(healthy, False), healthy

    merge = subprocess.run(as_here(merge_line, node=0, **here), cwd=ROOT, capture_output=True, text=True,
                           timeout=HANG_GUARD_S)
    assert merge.returncode == 1, merge.stdout + merge.stderr
    text = (tmp_path / "nightly.json").read_text()
    assert text.lstrip().startswith('{\n "diagnoses"')  # the bad group's diagnosis is on top of the file
    doc = json.loads(text)
    top = doc["diagnoses"][0]
    ranks = list(range(HANG_PER_NODE * HANG_GROUP, HANG_PER_NODE * (HANG_GROUP + 1)))
    assert (top["group"], top["rank"], top["global_rank"], top["launch"], top["status"], top["nodes"]) == (
        HANG_GROUP, 1, ranks[1], 1, "timeout", [HANG_GROUP])
    cases = {r["group"]: r for r in doc["results"] if r["launcher"] == "cpu"}
    assert {g: r["status"] for g, r in cases.items()} == {g: "timeout" if g == HANG_GROUP else "pass"
                                                          for g in range(HANG_NODES)}
    assert (f"TP group {HANG_GROUP} (ranks {ranks[0]}-{ranks[-1]}), global rank {ranks[1]}: rank 1 hung before "
            f"launch 1") in cases[HANG_GROUP]["detail"]
    suite = ET.parse(tmp_path / "nightly.xml").getroot().find("testsuite")
    first = [(p.get("name"), p.get("value")) for p in suite.find("properties")][:2]
    assert first[0] == ("result", "FAILED") and first[1][0] == "diagnosis.0"
    assert f"group={HANG_GROUP}" in first[1][1]
    assert {c.get("classname") for c in suite.findall("testcase")} >= {f"group{g}.markov_sharded.basic"
                                                                        for g in range(HANG_NODES)}

    record = {"work": str(tmp_path), "merged": {"json": str(tmp_path / "nightly.json")}, "memory": {},
              "agents": agents.__dict__, "processes_left": [],
              "shape": {"world": HANG_PER_NODE * HANG_NODES, "nodes": HANG_NODES, "per_node": HANG_PER_NODE,
                        "tp": HANG_PER_NODE}}
    (job,) = world_costs(record)["jobs"]
    assert job["bad_groups"] == [HANG_GROUP]
    assert job["hang_named_after_s"] <= 2 * hang_deadline_s, job
