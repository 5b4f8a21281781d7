"""examples/graph_desync.py: a graph-captured decode step with one rank replaying it once fewer, named by the flight
recorder alone; and the same loop eagerly, recorded, whose offline golden replay names the same rank and launch.

On the GPU (``@pytest.mark.gpu``): torchrun 2 and 4 processes sharing one GPU (gloo, torch symmetric memory with
``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1``, NVLink multicast off), the planted rank ``DESYNC_RANK``:

- graph mode: the job fails (the waiting ranks' all-reduce times out and traps); ``rankcheck flight`` on the rings
  names the planted rank and the launch it never began (``allreduce_mhc.0``'s publish of the last step);
- eager mode with ``--record``: the offline golden replay of its recording names the same rank and launch (and so
  do the eager run's own rings).

On the CPU: the eager loop with the golden stand-ins (``--impl golden``) recorded and replayed names the planted rank
and the launch the flight recorder numbers for that step; the options' checks.

Every subprocess runs in its own session with a deadline, and its process group is killed afterwards.
``python tests/examples/test_graph_desync.py [--tp 2 4] [--keep DIR]`` is the same runs as a driver without pytest
(no shell): per tp it prints three lines, ``graph`` (the flight finding of the graph run), ``eager kernel`` (the
offline golden replay of the eager run's recording) and ``eager rings`` (the flight finding of the eager run), each
with the object, named rank, launch and exit codes (job, reader), and exits 0 when every line named the planted rank
at the expected launch.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "graph_desync.py"
sys.path.insert(0, str(EXAMPLE.parent))

import graph_desync  # noqa: E402
from bounded_run import output, run_bounded  # noqa: E402
from harness.launch.load_scale import load_factor  # noqa: E402

DESYNC_RANK = 1
REPLAYS = 4
# An LL all-reduce call is two launches of its instance (publish, consumer); the planted rank never begins the
# publish of step K, the K-th step after the warm-up step 0.
LL_LAUNCHES_PER_CALL = 2
JOB_DEADLINE_S = 540  # startup (CuTe DSL compiles at construction) plus the kernels' 5 s deadline, with margin
READ_DEADLINE_S = 300
# What an eager run waits out, by impl: the job's gloo timeout (with golden stand-ins, rank 0 waits in the all-reduce
# of step K for a rank that never comes) and the replay's collective deadline (rank 0's thread waits there again).
# The kernel run keeps 30 s and 20 s (CuTe DSL compiles at construction, before the first collective); the golden
# stand-ins' healthy waits are short: 10 s and 5 s on a quiet host, times the load per core as the harness scales
# its own defaults (harness.launch.load_scale).
EAGER_WAITS_S = {"kernel": (30.0, 20.0), "golden": (10.0, 5.0)}
SHARED_GPU_ENV = {"TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES": "1", "NCCL_NVLS_ENABLE": "0",
                  "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# The replay's verdict line: "first divergence: rank 1 made 8 calls ... (ar.__call__, flight launch 8)".
REPLAY_NAMES = re.compile(r"^\s*first divergence: rank (\d+)\b.*?\(ar\.__call__, flight launch(?:es)? (\d+)\b", re.M)


@dataclass
class Run:
    """One mode's run: the job's exit code, the reader's (flight or replay), what it named, and the outputs."""

    tp: int
    mode: str
    job_exit: int
    read_exit: int
    rank: int | None
    launch: int | None
    output: str
    instance: str | None = None


def torchrun(tp: int, *example_args: str) -> subprocess.CompletedProcess:
    """The example under torchrun with ``tp`` processes (sharing the GPUs there are)."""
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(tp), str(EXAMPLE),
            "--desync-rank", str(DESYNC_RANK), "--replays", str(REPLAYS), *example_args]
    return run_bounded(argv, JOB_DEADLINE_S, SHARED_GPU_ENV)


def flight_run(tp: int, mode: str, job: subprocess.CompletedProcess, rings: Path) -> Run:
    """``rankcheck flight`` on the rings ``job`` left: the first divergent finding's instance, rank and launch."""
    report = rings.with_name(rings.name + ".json")
    read = run_bounded([sys.executable, "-m", "harness", "flight", str(rings), "--json", str(report)],
                       READ_DEADLINE_S)
    rank = launch = instance = None
    if report.is_file():
        divergent = [f for f in json.loads(report.read_text())["findings"] if not f["consistent"]]
        if divergent:
            rank, launch, instance = divergent[0]["rank"], divergent[0]["launch"], divergent[0]["instance"]
    return Run(tp, mode, job.returncode, read.returncode, rank, launch, output(job) + output(read), instance)


def graph_run(tp: int, work: Path) -> Run:
    """Graph mode, then ``rankcheck flight`` on its rings."""
    rings = work / f"flight_tp{tp}"
    return flight_run(tp, "graph", torchrun(tp, "--flight-dir", str(rings)), rings)


def eager_runs(tp: int, work: Path, impl: str = "kernel") -> tuple[Run, Run]:
    """Eager mode recorded: the offline golden replay of its recording (one intra-op thread: its ranks are threads
    of one process), and ``rankcheck flight`` on its rings (the golden stand-ins keep none)."""
    recording, rings = work / f"recording_{impl}_tp{tp}", work / f"eager_flight_{impl}_tp{tp}"
    pg_timeout_s, replay_deadline_s = EAGER_WAITS_S[impl]
    if impl == "golden":
        pg_timeout_s, replay_deadline_s = pg_timeout_s * load_factor(), replay_deadline_s * load_factor()
    job = torchrun(tp, "--eager", "--impl", impl, "--record", str(recording), "--flight-dir", str(rings),
                   "--pg-timeout-s", f"{pg_timeout_s:g}")
    read = run_bounded([sys.executable, "-m", "harness", "replay", "--bundle", str(recording), "--impl", "golden",
                        "--deadline", f"{replay_deadline_s:g}", "--run-dir", str(work / f"replay_{impl}_tp{tp}")],
                       READ_DEADLINE_S, {"OMP_NUM_THREADS": "1"})
    named = REPLAY_NAMES.search(read.stdout)
    rank, launch = (int(named.group(1)), int(named.group(2))) if named else (None, None)
    replayed = Run(tp, f"eager {impl}", job.returncode, read.returncode, rank, launch, output(job) + output(read), "ar")
    return replayed, flight_run(tp, "eager rings", job, rings)


def expected_launch() -> int:
    """The launch of ``allreduce_mhc.0`` the planted rank never began: the publish of step ``REPLAYS``."""
    return LL_LAUNCHES_PER_CALL * REPLAYS


def test_options_and_their_bounds():
    args = graph_desync.parse_args([])
    assert (args.impl, args.eager, args.replays, args.timeout_s, args.desync_rank) == ("kernel", False, 4, 5.0, None)
    for bad in (["--replays", "0"], ["--rows", "9"], ["--timeout-s", "0"], ["--record", "x"],
                ["--impl", "golden"]):
        with pytest.raises(SystemExit) as exc:
            graph_desync.parse_args(bad)
        assert exc.value.code == 2, bad


def test_a_flight_directory_holding_rings_of_another_job_is_refused(tmp_path):
    assert graph_desync.refuse_old_rings(str(tmp_path)) is None
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "allreduce_mhc.0.r0.p1.ring").write_bytes(b"")
    assert "already holds rings" in graph_desync.refuse_old_rings(str(tmp_path))


def test_graph_mode_without_a_gpu_exits_2_and_says_why():
    done = run_bounded([sys.executable, str(EXAMPLE)], 120, {"CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr, output(done)


def test_the_eager_golden_recording_replayed_names_the_planted_rank_and_the_launch(tmp_path):
    run, _ = eager_runs(2, tmp_path, impl="golden")
    assert run.job_exit != 0, run.output
    assert run.read_exit == 1, run.output
    assert (run.rank, run.launch) == (DESYNC_RANK, expected_launch()), run.output


@pytest.fixture(scope="module")
def graph_runs(tmp_path_factory):
    """The graph-mode run of each tp, made once for the module's tests (each is a torchrun job of minutes)."""
    runs: dict[int, Run] = {}

    def run_of(tp: int) -> Run:
        """The graph run at ``tp``, made on first use."""
        if tp not in runs:
            runs[tp] = graph_run(tp, tmp_path_factory.mktemp(f"graph_tp{tp}"))
        return runs[tp]

    return run_of


# One xdist worker runs both GPU tests of a tp (make gpu-test: --dist loadgroup), so each tp's graph run is made once,
# and the two tps run on two workers side by side.
@pytest.mark.gpu
@pytest.mark.parametrize("tp", [pytest.param(2, marks=pytest.mark.xdist_group("graph_desync_tp2")),
                                pytest.param(4, marks=pytest.mark.xdist_group("graph_desync_tp4"))])
def test_the_flight_recorder_alone_names_the_rank_that_replayed_once_fewer(tp, graph_runs):
    graph = graph_runs(tp)
    assert graph.job_exit != 0, graph.output  # the waiting ranks' kernels timed out and trapped
    assert graph.read_exit == 1, graph.output
    assert (graph.instance, graph.rank, graph.launch) == ("allreduce_mhc.0", DESYNC_RANK, expected_launch()), (
        graph.output)


@pytest.mark.gpu
@pytest.mark.parametrize("tp", [pytest.param(2, marks=pytest.mark.xdist_group("graph_desync_tp2")),
                                pytest.param(4, marks=pytest.mark.xdist_group("graph_desync_tp4"))])
def test_the_eager_recording_replayed_on_the_cpu_names_what_the_flight_recorder_named(tp, graph_runs, tmp_path):
    graph, (eager, eager_rings) = graph_runs(tp), eager_runs(tp, tmp_path)
    assert eager.job_exit != 0 and eager.read_exit == 1, eager.output
    assert (eager_rings.rank, eager_rings.launch) == (graph.rank, graph.launch), eager_rings.output
    assert (eager.rank, eager.launch) == (graph.rank, graph.launch) == (DESYNC_RANK, expected_launch()), (
        graph.output + eager.output)


def main(argv: list[str] | None = None) -> int:
    """The GPU runs without pytest: one table line per (tp, mode); exit 0 when every run named the planted rank at
    the expected launch."""
    parser = argparse.ArgumentParser(description="graph_desync on this GPU: the flight recorder's and the replay's "
                                                 "findings side by side")
    parser.add_argument("--tp", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--keep", metavar="DIR", help="keep rings, recordings and outputs here (default: a temp dir)")
    args = parser.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="graph_desync-"))
    if work.exists() and any(work.iterdir()):
        parser.error(f"--keep {work}: not empty (an earlier run's rings would be refused): give a new directory")
    work.mkdir(parents=True, exist_ok=True)
    print(f"{'tp':>3} {'mode':<13}{'object':<17}{'named rank':>11}{'launch':>8}  exit (job, reader)  expected "
          f"rank {DESYNC_RANK} launch {expected_launch()}", flush=True)
    good = True
    for tp in args.tp:
        for run in (graph_run(tp, work), *eager_runs(tp, work)):
            (work / f"{run.mode.replace(' ', '_')}_tp{tp}.log").write_text(run.output)
            ok = (run.rank, run.launch) == (DESYNC_RANK, expected_launch()) and run.job_exit != 0
            good &= ok
            print(f"{tp:>3} {run.mode:<13}{str(run.instance):<17}{str(run.rank):>11}{str(run.launch):>8}  "
                  f"({run.job_exit}, {run.read_exit}){'' if ok else '  <- NOT AS EXPECTED'}", flush=True)
    print(f"outputs in {work}")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
