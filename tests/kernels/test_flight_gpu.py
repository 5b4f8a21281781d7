"""The flight recorder on the GPU: rings written by the kernels, read by another process (kernels.flight).

Each case runs in a child process (this file run as a script, with a
deadline) that writes its rings into a directory the test gives it and
exits; the test (the parent) reads the ring files alone, as the harness
does after a hang or a trap: so every check here is also a check that the
rings outlive their process and are readable from outside it.

- ``probe``: the probe kernel (``flight_probe.py``) launched eagerly, and a
  CUDA graph of one launch replayed ``GRAPH_REPLAYS`` times: one record per
  launch and per replay, consecutive launch numbers, the fields as given,
  the digest as the host computes it, begun-not-ended for the variant
  without an end.
- ``families``: each family on two virtual ranks with the recorder on
  (sampler launches, all-reduce calls LL and BT, one sharded fused draft
  loop with its device exchange's gathers): every rank's ring holds one
  record per kernel launch, in launch order, all ended, and the reader
  finds the ranks consistent.
- ``desync``: the sampler on two virtual ranks, each launch captured once in
  a CUDA graph and replayed; rank 1 replays once fewer, rank 0's kernel
  times out (300 ms) and traps. The reader names rank 1 and the launch it
  never began, and rank 0's record of it is begun, not ended.

``python tests/kernels/test_flight_gpu.py CASE DIR`` runs one case.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))
for path in (ROOT, HERE):
    if path not in sys.path:
        sys.path.insert(0, path)

from kernels import flight  # noqa: E402
from trap_child import run_script  # noqa: E402

pytestmark = pytest.mark.gpu

CHILD_DEADLINE_S = 240
GRAPH_REPLAYS = 5
PROBE_LAUNCHES = 3
SAMPLER_LAUNCHES = 3
DESYNC_REPLAYS = 4  # rank 0 replays this many times, rank 1 one fewer
FUSED_STEPS = 3


def run_child(case: str, directory) -> subprocess.CompletedProcess:
    """Run ``case`` in a child process writing its rings to ``directory`` (killed past the deadline)."""
    return run_script([os.path.abspath(__file__), case, str(directory)], CHILD_DEADLINE_S)


def rings_of(directory) -> dict[tuple[str, str, int], flight.Ring]:
    """The rings under ``directory`` by (family, instance name, rank); a problem fails the test."""
    flight.collect(directory)
    rings, problems = flight.read_directory(directory)
    assert not problems, problems
    return {(r.header.family, r.header.name, r.header.rank): r for r in rings}


def in_order(ring: flight.Ring) -> list[flight.LaunchRecord]:
    """The ring's records by launch number (no counter wrap in these tests)."""
    return sorted(ring.records, key=lambda r: r.launch)


# --------------------------------------------------------------------------- children


def child_probe(directory: str) -> None:
    """Probe launches with tags 10, 11, 12; a graph of one launch (tag 20) replayed; one launch with no end."""
    import cuda.bindings.driver as cuda

    from flight_probe import THREADS, FlightProbe
    from kernels.compile import compiled

    device = torch.device("cuda", 0)
    out = torch.zeros(4 * THREADS, dtype=torch.int32, device=device)
    recorders = {end: flight.FlightRecorder("markov_fused", rank=0, world=1, device=device, capacity=16,
                                            directory=directory, name=f"probe.{'end' if end else 'noend'}")
                 for end in (True, False)}
    kernels = {end: compiled(FlightProbe(end=end), None, remedy="test") for end in (True, False)}

    def launch(end: bool, tag: int) -> None:
        """One probe launch (4 CTAs) on the current stream."""
        from cutlass import Int32, Int64

        stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
        kernels[end](Int64(out.data_ptr()), Int32(tag), Int32(tag & 1), Int32(7), Int32(3), Int32(5), Int32(4),
                     *flight.flight_args(recorders[end]), stream)

    for n in range(PROBE_LAUNCHES):
        launch(True, 10 + n)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(True, 20)
    for _ in range(GRAPH_REPLAYS):
        graph.replay()
    launch(False, 30)
    torch.cuda.synchronize()
    assert out.cpu().tolist() == list(range(4 * THREADS))


def child_families(directory: str) -> None:
    """Each family on two virtual ranks with the recorder on (module docstring)."""
    flight.set_directory(directory)
    _sampler_run()
    _allreduce_run()
    _fused_run()


def _sampler_run() -> None:
    """``SAMPLER_LAUNCHES`` eager sampler launches on two virtual ranks."""
    from test_markov_sharded_gpu import base_config, make_call, make_static, run_world

    config = base_config(vocab=2048, steps=2)
    calls = [make_call(config, 2, 500 + i) for i in range(SAMPLER_LAUNCHES)]
    run_world(2, make_static(config["vocab"], 15), config, calls)


def _allreduce_run() -> None:
    """Two all-reduce calls on two virtual ranks: 2 rows (LL), then 4 (BT from 4 rows)."""
    from allreduce_cases import make_call, make_config, make_static, run_virtual

    config = make_config(5120, 2, capacity=8, bt_min_rows=4)
    run_virtual(config, make_static(config, 1), [(make_call(config, 2, 2), {}), (make_call(config, 4, 3), {})])


def _fused_run() -> None:
    """One sharded draft loop of ``FUSED_STEPS`` steps on two virtual ranks (its device exchange included)."""
    from test_markov_fused_gpu import build_case, config_of, run_kernels

    static, inputs = build_case(vocab=2048, rows=2, steps=FUSED_STEPS)
    run_kernels(static, config_of(2048), inputs, tp=2, pdl=False)


def child_desync(directory: str) -> None:
    """Graph replays of one sampler launch on two virtual ranks; rank 1 replays once fewer (module docstring)."""
    from harness.families.markov_sharded.kernel import ShardedMarkovSystem
    from kernels import hostcopy
    from kernels.fabric import VirtualFabric
    from test_markov_sharded_gpu import FABRIC_TIMEOUT_S, base_config, capture, make_call, make_static

    flight.set_directory(directory)
    device = torch.device("cuda", torch.cuda.current_device())
    config = {**base_config(vocab=2048, steps=2), "timeout_ns": 300_000_000, "world": 2}
    static = {k: v.to(device) for k, v in make_static(config["vocab"], 16).items()}
    inputs, params = make_call(config, 2, 600)

    def body(fabric):
        """Capture, then replay in lockstep until rank 1 stops one replay short."""
        sampler = ShardedMarkovSystem(fabric, static, config)
        buffers = {k: hostcopy.to_device(v, device) for k, v in inputs.items()}
        graph, _ = capture(lambda: sampler.launch(buffers, params))
        torch.cuda.current_stream(device).synchronize()
        fabric.barrier()
        replays = DESYNC_REPLAYS - fabric.rank
        for _ in range(replays):
            graph.replay()
        try:
            torch.cuda.current_stream(device).synchronize()
        except RuntimeError:  # rank 0's last launch waits for rank 1 until its deadline, then traps
            pass
        return replays

    VirtualFabric.run(VirtualFabric.create(2, device, timeout_s=FABRIC_TIMEOUT_S), body)


CHILDREN = {"probe": child_probe, "families": child_families, "desync": child_desync}


# --------------------------------------------------------------------------- tests


def _assert_child_ran(proc: subprocess.CompletedProcess, *, may_trap: bool = False) -> None:
    """The child exited cleanly (or, with ``may_trap``, however a trapped context lets it)."""
    if not may_trap:
        assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


def test_probe_records_each_launch_and_each_graph_replay(tmp_path):
    _assert_child_ran(run_child("probe", tmp_path))
    rings = rings_of(tmp_path)
    ended = in_order(rings["markov_fused", "probe.end", 0])
    assert [r.launch for r in ended] == list(range(PROBE_LAUNCHES + GRAPH_REPLAYS))
    assert [r.tag for r in ended] == [10 + n for n in range(PROBE_LAUNCHES)] + [20] * GRAPH_REPLAYS
    for record in ended:
        assert (record.kernel, record.rows, record.steps, record.aux, record.ctas) == ("anchor", 7, 3, 5, 4)
        assert record.parity == record.tag & 1 and record.digest == flight.digest([7, 3])
        assert record.status == "ended" and not record.torn and record.start_ns <= record.end_ns
    (hung,) = rings["markov_fused", "probe.noend", 0].records
    assert (hung.launch, hung.tag, hung.status, hung.end_ns) == (0, 30, "begun", None)


def test_each_family_on_virtual_ranks_records_every_launch_consistently(tmp_path):
    _assert_child_ran(run_child("families", tmp_path))
    rings = rings_of(tmp_path)
    for rank in range(2):
        sampler = in_order(rings["markov_sharded", "markov_sharded.0", rank])
        assert [(r.launch, r.kernel, r.rows, r.steps, r.parity) for r in sampler] == [
            (n, "sample", 2, 2, n & 1) for n in range(SAMPLER_LAUNCHES)]
        assert [r.tag for r in sampler] == [1 + n for n in range(SAMPLER_LAUNCHES)]
        allreduce = in_order(rings["allreduce_mhc", "allreduce_mhc.0", rank])
        assert [(r.kernel, r.protocol, r.rows) for r in allreduce] == [
            ("publish", "ll", 2), ("consumer", "ll", 2),
            ("publish", "bt", 4), ("owner_reduce", "bt", 4), ("consumer", "bt", 4)]
        fused = in_order(rings["markov_fused", "markov_fused.0", rank])
        assert [r.kernel for r in fused] == ["anchor"] + ["step", "gather", "pick"] * FUSED_STEPS + ["gather", "fill"]
        assert [r.aux for r in fused if r.kernel == "step"] == list(range(FUSED_STEPS))
        # the packets' gathers carry their step, the draft's gather -1; each gather counts its own tags
        gathers = [r for r in fused if r.kernel == "gather"]
        assert [r.aux for r in gathers] == list(range(FUSED_STEPS)) + [0xFFFFFFFF]
        assert [(r.tag, r.parity) for r in gathers] == [(1 + n, n & 1) for n in range(FUSED_STEPS)] + [(1, 0)]
        for record in sampler + allreduce + fused:
            assert record.status == "ended" and not record.torn, record
    findings = flight.first_divergence(rings.values())
    assert len(findings) == 3 and all(f.consistent for f in findings), [f.describe() for f in findings]


def test_a_rank_that_replays_its_graph_once_fewer_is_named_with_the_launch(tmp_path):
    _assert_child_ran(run_child("desync", tmp_path), may_trap=True)
    rings = rings_of(tmp_path)
    (finding,) = flight.first_divergence(rings.values())
    assert (finding.rank, finding.launch, finding.kernel) == (1, DESYNC_REPLAYS - 1, "sample"), finding.describe()
    assert "never began" in finding.what
    stuck = in_order(rings["markov_sharded", "markov_sharded.0", 0])[-1]
    assert (stuck.launch, stuck.status) == (DESYNC_REPLAYS - 1, "begun")
    assert len(rings["markov_sharded", "markov_sharded.0", 1].records) == DESYNC_REPLAYS - 1


def main(argv: list[str]) -> int:
    """Run the child case ``argv[1]`` into directory ``argv[2]``; 0 when it returned, 1 when it raised."""
    if len(argv) != 3 or argv[1] not in CHILDREN:
        print(f"usage: {argv[0]} {{{','.join(CHILDREN)}}} DIR", file=sys.stderr)
        return 2
    try:
        CHILDREN[argv[1]](argv[2])
    except BaseException:  # noqa: BLE001 - reported on stderr; the exit code says it
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # A trapped CUDA context can hang the interpreter's teardown: leave at once (the rings are files).
    os._exit(code)
