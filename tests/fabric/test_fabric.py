"""CPU tests of the fabric protocol: argument checks, the collective-allocation
agreement (in-process ranks and real gloo processes), deadlines, and the
multicast gate. None touches a GPU or a multicast API."""

from __future__ import annotations

import time

import pytest
import torch

from fabric_launch import run_symmetric_worker
from kernels.fabric import (
    ALLOW_MULTICAST_ENV,
    AllocRequest,
    CollectiveTimeout,
    Fabric,
    FabricMismatch,
    VirtualFabric,
    OVERLAPPING_DEVICES_ENV,
    multicast_gate,
    parse_alloc_spec,
    placement_problem,
)


def test_parse_alloc_spec_accepts_bytes_and_typed():
    assert parse_alloc_spec("a", 16) == ((16,), torch.uint8)
    assert parse_alloc_spec("b", ((2, 3), torch.bfloat16)) == ((2, 3), torch.bfloat16)
    assert parse_alloc_spec("c", (5, torch.int32)) == ((5,), torch.int32)


@pytest.mark.parametrize(
    "name, spec, message",
    [
        ("", 16, "name must be a non-empty str"),
        ("a", 0, "nbytes must be > 0"),
        ("a", -4, "nbytes must be > 0"),
        ("a", True, "spec must be a byte count"),
        ("a", "16", "spec must be a byte count"),
        ("a", ((2, 0), torch.float32), "every extent of shape must be an int > 0"),
        ("a", ((), torch.float32), "shape must be a non-empty sequence"),
        ("a", ((2,), "float32"), "dtype must be a torch.dtype"),
    ],
)
def test_parse_alloc_spec_rejects_bad_arguments(name, spec, message):
    with pytest.raises((ValueError, TypeError), match=message):
        parse_alloc_spec(name, spec)


def test_alloc_request_bytes_and_header():
    request = AllocRequest(2, "mailbox", (3, 4), torch.bfloat16)
    assert request.nbytes == 24
    assert request.header() == {
        "op": "alloc",
        "index": 2,
        "name": "mailbox",
        "shape": [3, 4],
        "dtype": "bfloat16",
        "nbytes": 24,
    }


def test_virtual_fabric_satisfies_protocol():
    fabrics = VirtualFabric.create(2, "cpu", timeout_s=5)
    assert all(isinstance(f, Fabric) for f in fabrics)
    assert [f.rank for f in fabrics] == [0, 1] and all(f.world == 2 for f in fabrics)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_virtual_fabric_ring_exchange_on_cpu(world):
    def body(fabric):
        buf = fabric.alloc("ring", ((world, 5), torch.int32))
        assert torch.count_nonzero(buf.local) == 0
        table = buf.peer_ptrs.tolist()
        assert table == list(buf.peer_addresses) and table[fabric.rank] == buf.local.data_ptr()
        assert len(set(table)) == world and buf.multicast_ptr == 0
        fabric.barrier()  # every rank has seen its zeros before anyone writes
        successor = buf.peer_tensor((fabric.rank + 1) % world)
        successor[fabric.rank] = torch.arange(5, dtype=torch.int32) + 100 * fabric.rank
        fabric.barrier()
        return buf.local.clone()

    results = VirtualFabric.run(VirtualFabric.create(world, "cpu", timeout_s=10), body)
    for rank, local in enumerate(results):
        source = (rank - 1) % world
        expected = torch.zeros(world, 5, dtype=torch.int32)
        expected[source] = torch.arange(5, dtype=torch.int32) + 100 * source
        assert torch.equal(local, expected)


def test_virtual_all_gather_stacks_by_rank():
    results = VirtualFabric.run(
        VirtualFabric.create(3, "cpu", timeout_s=10),
        lambda f: f.all_gather(torch.full((2,), float(f.rank), dtype=torch.float32)),
    )
    for stacked in results:
        assert torch.equal(stacked, torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]))


def test_virtual_alloc_mismatch_names_both_requests():
    messages = {}

    def body(fabric):
        fabric.alloc("first", 64)
        try:
            fabric.alloc("mailbox" if fabric.rank == 0 else "flags", 4096 if fabric.rank == 0 else 128)
        except FabricMismatch as exc:
            messages[fabric.rank] = str(exc)
            raise

    with pytest.raises(FabricMismatch):
        VirtualFabric.run(VirtualFabric.create(2, "cpu", timeout_s=10), body)
    assert set(messages) == {0, 1}, "every rank must see the disagreement, none may hang"
    for message in messages.values():
        assert "rank 0 called alloc #1 'mailbox' 4096 bytes" in message
        assert "rank 1 called alloc #1 'flags' 128 bytes" in message


def test_virtual_mismatched_collectives_are_named():
    def body(fabric):
        if fabric.rank == 0:
            fabric.alloc("mailbox", 256)
        else:
            fabric.barrier()

    with pytest.raises(FabricMismatch, match=r"rank 0 called alloc #0 'mailbox' 256 bytes.*rank 1 called barrier"):
        VirtualFabric.run(VirtualFabric.create(2, "cpu", timeout_s=10), body)


def test_virtual_all_gather_shape_mismatch():
    with pytest.raises(FabricMismatch, match=r"all_gather float32 \[2\].*all_gather float32 \[3\]"):
        VirtualFabric.run(
            VirtualFabric.create(2, "cpu", timeout_s=10),
            lambda f: f.all_gather(torch.zeros(2 + f.rank)),
        )


def test_virtual_missing_rank_times_out_naming_it():
    fabrics = VirtualFabric.create(3, "cpu", timeout_s=0.5)

    def body(fabric):
        if fabric.rank != 2:
            fabric.barrier()

    with pytest.raises(CollectiveTimeout, match=r"ranks \[2\] did not arrive"):
        VirtualFabric.run(fabrics, body)


# A barrier deadline no loaded machine reaches by itself: only a release by the failure ends the wait before it.
RELEASE_DEADLINE_S = 600


def test_virtual_rank_error_releases_the_others():
    def body(fabric):
        if fabric.rank == 1:
            raise KeyError("rank 1 broke")
        fabric.barrier()

    start = time.monotonic()
    with pytest.raises(KeyError, match="rank 1 broke"):
        VirtualFabric.run(VirtualFabric.create(2, "cpu", timeout_s=RELEASE_DEADLINE_S), body)
    # sooner than the barrier's deadline: the waiting rank was released by the failure (however loaded the machine)
    assert time.monotonic() - start < RELEASE_DEADLINE_S, "the waiting rank must be released by the failure"


def test_virtual_create_rejects_bad_world():
    with pytest.raises(ValueError, match="world must be an int >= 1"):
        VirtualFabric.create(0, "cpu")


@pytest.mark.parametrize(
    "ptr, env, allowed, reason",
    [
        (0, {ALLOW_MULTICAST_ENV: "1"}, False, "no multicast address"),
        (0x1000, {}, False, "opt-in"),
        (0x1000, {ALLOW_MULTICAST_ENV: "1"}, True, "allowed"),
        (0x1000, {ALLOW_MULTICAST_ENV: "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}, False, "DISABLE_MULTICAST=1"),
        # torch honours the switch only when it is exactly "1".
        (0x1000, {ALLOW_MULTICAST_ENV: "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "true"}, True, "allowed"),
        (0x1000, {ALLOW_MULTICAST_ENV: "yes"}, False, "opt-in"),
        (0x1000, {ALLOW_MULTICAST_ENV: "0"}, False, "opt-in"),
    ],
)
def test_multicast_gate(ptr, env, allowed, reason):
    ok, why = multicast_gate(ptr, env)
    assert ok is allowed
    assert reason in why


def test_placement_of_ranks_sharing_a_gpu():
    shared = [{"host": "h", "device": "cuda:0"}, {"host": "h", "device": "cuda:1"}, {"host": "h", "device": "cuda:0"}]
    apart = [{"host": "a", "device": "cuda:0"}, {"host": "b", "device": "cuda:0"}]
    assert placement_problem(apart, "nccl", {}) is None
    assert "ranks [0, 2] share one GPU; set TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1" in placement_problem(
        shared, "gloo", {}
    )
    assert placement_problem(shared, "gloo", {OVERLAPPING_DEVICES_ENV: "1"}) is None
    assert "NCCL refuses" in placement_problem(shared, "nccl", {OVERLAPPING_DEVICES_ENV: "1"})


def test_symmetric_protocol_over_gloo_processes(tmp_path):
    reports = run_symmetric_worker("protocol", 2, str(tmp_path), timeout_s=120)
    for report in reports:
        assert report["gathered"] == [[1], [11]]
        assert "rank 0 called alloc #0 'mailbox' 4096 bytes" in report["mismatch"]
        assert "rank 1 called alloc #0 'mailbox' 8192 bytes" in report["mismatch"]
        assert "device must be CUDA" in report["cpu_alloc"]
    assert reports[0]["missing_rank"] is not None
    assert reports[0]["missing_rank_wait_s"] < 5.5
