"""The fused loop's device exchange on the GPU: the whole vocab-parallel loop at virtual tp 2 and 4 captured in one
CUDA graph per rank, its replays equal to eager calls and to the golden loop bit for bit, and a stale tag in the
mailbox never taken (the wait times out naming it instead; in a child process, since the trap ends the context).

Ranks are threads of this process on one GPU, one stream each (``kernels.fabric.VirtualFabric``); the operands and
the golden come from ``test_markov_fused_gpu`` (1/64-grid weights: the fp32-matmul GEMV is exact and capturable).
"""

from __future__ import annotations

import os

import pytest
import torch

from test_markov_fused_gpu import assert_same, build_case, config_of, golden, grid_bias, to_gpu
from trap_child import child_env, run_child, trapped_report

pytestmark = pytest.mark.gpu


def _host(outputs: dict) -> dict:
    """A rank's outputs copied to the host through pinned memory (a pageable copy could wait behind a peer's)."""
    from kernels import hostcopy

    return {k: hostcopy.to_host(v.detach()).clone() for k, v in outputs.items()}


def _load(target: dict, inputs: dict, names) -> None:
    """Copy the CPU ``inputs`` named into a rank's device tensors through pinned memory."""
    from kernels import hostcopy

    for name in names:
        hostcopy.copy_into(target[name], inputs[name])


@pytest.mark.parametrize("tp, pdl", [(2, True), (4, True), (4, False)])
def test_loop_in_one_graph_equals_eager_and_golden(tp, pdl):
    from harness.families.markov_fused.kernel import FusedMarkovLoop
    from kernels.fabric import VirtualFabric

    vocab = 4096
    config = config_of(vocab, block=512)  # the golden's (world 1); the ranks get tp
    static, first = build_case(vocab=vocab, seed=70 + tp)
    later = [build_case(vocab=vocab, seed=seed, nan=seed % 2 == 0, padding=True, wrap=seed % 3 == 0)[1]
             for seed in (71, 72, 73)]
    static_gpu = {k: v.cuda() for k, v in static.items()}
    live = [to_gpu(first) for _ in range(tp)]
    torch.cuda.synchronize()

    def body(fabric):
        """One rank: eager call, capture of the same call, then per input set a replay and an eager call."""
        system = FusedMarkovLoop(fabric, static_gpu, {**config, "tp": tp, "pdl": pdl}, bias_fn=grid_bias)
        mine = live[fabric.rank]
        stream = torch.cuda.current_stream()
        eager_first = system.launch(mine, {})
        stream.synchronize()
        runs = [("eager first", _host(eager_first))]
        graph = torch.cuda.CUDAGraph()
        # The ranks are threads of one context: a device-wide synchronization anywhere (torch.cuda.graph's own,
        # a pinned allocation) would invalidate a peer's capture, so every rank captures between two barriers,
        # on its stream, and none replays (and waits for peers) before every rank captured.
        fabric.barrier()
        graph.capture_begin(capture_error_mode="thread_local")
        captured = system.launch(mine, {})
        graph.capture_end()
        fabric.barrier()
        for index, inputs in enumerate([first, *later]):
            _load(mine, inputs, mine)
            graph.replay()
            stream.synchronize()
            runs.append((f"replay {index}", _host(captured)))
            _load(mine, inputs, ["cache"])
            eager = system.launch(mine, {})
            stream.synchronize()
            runs.append((f"eager {index}", _host(eager)))
        return runs

    per_rank = VirtualFabric.run(VirtualFabric.create(tp, "cuda", timeout_s=120), body)
    wants = [golden(static, config, inputs) for inputs in (first, *later)]
    for rank, runs in enumerate(per_rank):
        assert len(runs) == 1 + 2 * len(wants)
        assert_same(runs[0][1], wants[0], f"tp {tp} rank {rank} eager first")
        for label, got in runs[1:]:
            assert_same(got, wants[int(label.split()[-1])], f"tp {tp} rank {rank} {label}")


def test_stale_tag_is_never_taken(tmp_path):
    """Rank 1 never posts; rank 0's mailbox holds rank 1's payload and tag from two launches back. Rank 0 must not
    take it: its wait passes the deadline and the record names rank 1, the tag it expected and the stale one."""
    from kernels.markov_fused.exchange_layout import tag_of

    _, report = trapped_report("markov_exchange_stale_child.py", tmp_path / "stale.json")
    assert report["kind_name"] == "MAILBOX_TAG" and report["rank"] == 0 and report["awaited_rank"] == 1, report
    assert report["expected_tag"] == tag_of(0) and report["seen_tag"] == tag_of((0 - 2) & 0xFFFFFFFF), report
    assert report["launch"] == 0, report


# The disagreement tests share one worker (make gpu-test: --dist loadgroup), so the module fixture below starts its
# six trapping children once, not once on every worker that draws one of its tests.
DISAGREEMENTS = pytest.mark.xdist_group("markov_disagreements")


@pytest.fixture(scope="module")
def disagreements(tmp_path_factory):
    """Every (mode, case) of ``markov_disagree_child.py``, each in its own process (each ends in a trap), run side
    by side; the children share one artifact directory, so the loop's kernels compile once."""
    from concurrent.futures import ThreadPoolExecutor

    work = tmp_path_factory.mktemp("disagree")
    child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "markov_disagree_child.py")
    env = child_env(RANKCHECK_KERNEL_ARTIFACTS=str(work / "kernels"))
    keys = [(mode, case) for mode in ("eager", "graph") for case in ("never", "sizes", "skip")]

    def run(key):
        """One child's JSON result, or ``{"missing": ...}`` saying where it was stuck."""
        dump = work / f"{key[0]}_{key[1]}.json"
        return run_child([child, *key, str(dump)], dump, env=env)

    with ThreadPoolExecutor(len(keys)) as pool:
        return dict(zip(keys, pool.map(run, keys)))


def waiting_rank_report(result: dict, launch: int) -> dict:
    """Rank 0's record of a case where only rank 0 waits: a MAILBOX_TAG timeout at ``launch`` naming rank 1."""
    assert "missing" not in result, f"the child wrote no result: {result.get('missing')}"  # a str: shown whole
    assert result["failed"][0], result
    report = result["reports"][0]
    assert report is not None and result["reports"][1] is None, result
    assert (report["kind_name"], report["rank"], report["awaited_rank"], report["launch"]) == (
        "MAILBOX_TAG", 0, 1, launch), report
    return report


@DISAGREEMENTS
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_a_rank_that_never_calls_is_named_at_the_deadline(mode, disagreements):
    from kernels.markov_fused.exchange_layout import tag_of

    report = waiting_rank_report(disagreements[mode, "never"], launch=0)
    assert (report["expected_tag"], report["seen_tag"]) == (tag_of(0), 0), report  # rank 1 never posted
    assert report["timeout_ns"] == 2_000_000_000 <= report["elapsed_ns"], report


@DISAGREEMENTS
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_ranks_calling_with_different_sizes_are_named_with_both_sizes(mode, disagreements):
    result = disagreements[mode, "sizes"]
    assert "missing" not in result, f"the child wrote no result: {result.get('missing')}"  # a str: shown whole
    assert any(result["failed"]), result
    committed = [r for r in result["reports"] if r is not None]
    assert committed, result
    for report in committed:  # each rank that wrote one names the other and both sizes, at once
        me, other = report["rank"], 1 - report["rank"]
        sizes = {0: 4 * 16, 1: 2 * 16}
        assert (report["kind_name"], report["awaited_rank"], report["launch"]) == ("CALL_MISMATCH", other, 0), report
        assert (report["expected_tag"], report["seen_tag"]) == (sizes[me], sizes[other]), report
        assert report["elapsed_ns"] == 0 and not report["torn"], report
        assert f"rank {other} called with {sizes[other]} bytes where rank {me} called with {sizes[me]}" in (
            report["describe"]), report


@DISAGREEMENTS
@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_a_rank_that_skips_a_call_is_named_by_the_rank_it_left_waiting(mode, disagreements):
    from kernels.markov_fused.exchange_layout import tag_of

    # Rank 0's third call (launch 2) waits for rank 1, whose flag of that parity still holds launch 0's tag.
    report = waiting_rank_report(disagreements[mode, "skip"], launch=2)
    assert (report["expected_tag"], report["seen_tag"]) == (tag_of(2), tag_of(0)), report
