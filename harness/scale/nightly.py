"""The nightly job's shape on one host: one ``harness validate`` agent per simulated node, one c10d rendezvous.

``node_argv`` is README's nightly line for one node with this host's
values (``--launcher cpu``, c10d on ``127.0.0.1``), plus the scenario
selection, the planted fault and the per-launch deadline. ``run_agents``
starts one agent per node (every one at once, the last node first, so that
c10d meets them out of node order as on a real machine), samples the
workers' memory while they run, and returns when every agent has exited or
the deadline has passed; every process of every agent is then ended and
verified gone (``harness.launch.supervision.end_trees``: the agents' own process
trees are nested in theirs, so a killed agent leaves nothing behind).
``run_world`` does that for one world and merges the per-node reports. The
simulated nodes share the host's cores: their ranks get their share of
OpenMP threads (``one_host_env``), not each node a machine's worth.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from harness.reports.merge import MergeError, run_merge
from harness.scale.memory import MemorySampler, processes_mentioning
from harness.launch.supervision import Supervised, end_trees
from harness.wire.tp_groups import group_count

REPO_ROOT = Path(__file__).resolve().parents[2]
JOB_NAME = "nightly"
POLL_S = 1.0


@dataclass(frozen=True)
class Shape:
    """One world of the nightly shape: nodes x processes per node, the TP size, and where the hang is planted."""

    world: int
    per_node: int
    tp: int
    hang_group: int | None

    @property
    def nodes(self) -> int:
        """How many agents (simulated nodes) the world takes."""
        return self.world // self.per_node

    @property
    def groups(self) -> int:
        """How many TP groups the world has."""
        return group_count(self.world, self.tp)


def shape_of(world: int, per_node: int = 4, tp: int = 4, hang_group: int | None = -1) -> Shape:
    """The nightly shape at ``world`` ranks: agents of ``per_node`` (or one agent of a smaller world), TP ``tp`` where it
    divides (else the agent's size); ``hang_group`` -1 plants the hang in the middle group, None plants none."""
    per = min(per_node, world)
    if world % per:
        raise ValueError(f"world {world} is not a whole number of agents of {per}")
    size = tp if tp <= per and per % tp == 0 else per
    groups = group_count(world, size)
    group = groups // 2 if hang_group == -1 else hang_group
    if group is not None and not 0 <= group < groups:
        raise ValueError(f"--hang-group {group}: world {world} at tp {size} has groups 0..{groups - 1}")
    return Shape(world, per, size, group)


def free_ports(count: int = 16, attempts: int = 50) -> int:
    """The first of ``count`` consecutive free TCP ports on the loopback address (job ``i`` meets at the first + ``i``)."""
    for _ in range(attempts):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            for port in range(base, base + count):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError(f"no {count} consecutive free ports on 127.0.0.1 in {attempts} attempts")


def node_argv(shape: Shape, node: int, *, endpoint: str, rdzv_id: str, out: Path, run_dir: Path,
              scenarios: Sequence[str], hang: str | None, deadline_s: float) -> list[str]:
    """README's nightly ``harness validate`` line for ``node`` of ``shape`` on this host (launcher cpu, c10d on loopback)."""
    argv = [sys.executable, "-m", "harness", "validate", "--launcher", "cpu",
            "--nnodes", str(shape.nodes), "--node-rank", str(node), "--nproc-per-node", str(shape.per_node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id,
            "--tp", str(shape.tp), "--junit", str(out / f"{JOB_NAME}.xml"), "--json", str(out / f"{JOB_NAME}.json"),
            "--scenario", *scenarios, "--deadline", f"{deadline_s:g}", "--run-dir", str(run_dir)]
    if hang:
        argv += ["--inject", hang]
    return argv


def one_host_env(world: int, **extra: str) -> dict:
    """The environment of the agents of a ``world``-rank job simulated on this host (plus ``extra``).

    No GPU is needed (the cpu launcher) and none is touched. The simulated
    nodes share this host's cores: each job runner would give its node's
    ranks the machine's cores, as on a real node, which times the nodes here
    oversubscribes the cores many times over (OpenMP threads spinning, a
    launch seconds late); so every rank gets its share, at least one."""
    threads = max(1, (os.cpu_count() or 1) // world)
    return dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS=str(threads), **extra)


@dataclass
class AgentsOutcome:
    """How the agents of one world ended: exit codes by node, whether the deadline ended them, what was left."""

    returncodes: dict = field(default_factory=dict)
    timed_out: bool = False
    leftovers: list = field(default_factory=list)
    wall_s: float = 0.0


def run_agents(argvs: Sequence[list[str]], log_dir: Path, *, deadline_s: float, env: dict | None = None,
               sampler: MemorySampler | None = None) -> AgentsOutcome:
    """Start one agent per argv (the last first), sample memory every second, end them all by ``deadline_s``; verify gone."""
    started = time.monotonic()
    trees: list[Supervised] = []
    logs = []
    outcome = AgentsOutcome()
    try:
        for node in reversed(range(len(argvs))):
            logs.append(open(log_dir / f"agent{node}.log", "wb"))  # noqa: SIM115 - closed below
            trees.append(Supervised(argvs[node], env=env, cwd=str(REPO_ROOT), stdout=logs[-1], stderr=logs[-1]))
        trees.reverse()  # by node again
        while any(t.proc.poll() is None for t in trees):
            if time.monotonic() - started > deadline_s:
                outcome.timed_out = True
                break
            if sampler is not None:
                sampler.sample()
            time.sleep(POLL_S)
    finally:
        outcome.leftovers = end_trees(trees)
        for log in logs:
            log.close()
    outcome.returncodes = {node: t.proc.returncode for node, t in enumerate(trees)}
    outcome.wall_s = time.monotonic() - started
    return outcome


def run_world(shape: Shape, *, out: Path, work: Path, scenarios: Sequence[str], deadline_s: float,
              budget_s: float, cache_dir: Path) -> dict:
    """Run the nightly shape at one world, merge its reports under ``out``; return what happened (for ``measure``)."""
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    endpoint, rdzv_id = f"127.0.0.1:{free_ports()}", f"scale-w{shape.world}"
    hang = None
    if shape.hang_group is not None:
        hang = f"{scenarios[0]}:hang:rank=1,launch=1,group={shape.hang_group}"
    argvs = [node_argv(shape, node, endpoint=endpoint, rdzv_id=rdzv_id, out=work, run_dir=work / f"run{node}",
                       scenarios=scenarios, hang=hang, deadline_s=deadline_s) for node in range(shape.nodes)]
    env = one_host_env(shape.world, RANKCHECK_CACHE_DIR=str(cache_dir))  # the nodes share one reference cache
    sampler = MemorySampler(str(work))
    wall_started = time.time()
    agents = run_agents(argvs, work, deadline_s=budget_s, env=env, sampler=sampler)
    left = sorted(processes_mentioning(str(work)).values())
    merged = {"junit": str(out / f"{JOB_NAME}.xml"), "json": str(out / f"{JOB_NAME}.json")}
    reports = work / (f"{JOB_NAME}.node*.json" if shape.nodes > 1 else f"{JOB_NAME}.json")
    try:
        with open(work / "merge.log", "w", encoding="utf-8") as log:
            merged["exit_code"] = run_merge([str(reports)], junit=merged["junit"], json_path=merged["json"], stream=log)
    except MergeError as exc:
        merged["error"] = str(exc)
    return {"shape": shape.__dict__ | {"nodes": shape.nodes, "groups": shape.groups}, "hang": hang,
            "scenarios": list(scenarios), "deadline_s": deadline_s, "started": wall_started,
            "agents": agents.__dict__, "processes_left": left, "memory": sampler.summary(), "merged": merged,
            "work": str(work)}


__all__ = ["AgentsOutcome", "Shape", "free_ports", "node_argv", "one_host_env", "run_agents", "run_world",
           "shape_of"]
