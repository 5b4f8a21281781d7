"""Several nodes: each job meets at its own port, in a store a harness holds, and the nodes count in it when done.

A harness serves a job's store (``HeldStore``) when the endpoint is its
machine's and the port is free; three nodes' counters meet in it (done,
then exited), each counting once however often it says so, and the store is
finished when every node's agent has exited, not merely every node is done,
or when its deadline has passed; a store that is gone makes every question
unanswered (False), quickly, without raising.
"""

import time

from harness.launch.torchrun_options import Rendezvous
from harness.launch.job_store import CONNECT_TIMEOUT_S, HeldStore, HeldStores, NodesDone
from harness.scale.nightly import free_ports


def test_each_job_meets_at_the_endpoints_port_plus_its_number():
    rdzv = Rendezvous(nnodes=2, endpoint="head:29500", id="J")
    assert [rdzv.job_endpoint(i) for i in (0, 3)] == ["head:29500", "head:29503"]
    assert rdzv.job_id(3) == "J-job3" and Rendezvous(nnodes=2, endpoint="h").job_id(0) == "rankcheck-job0"
    assert Rendezvous(nnodes=2, endpoint="head").job_endpoint(2) == "head"  # no port: torchrun's default


def test_the_nodes_are_counted_once_each_in_the_store_the_harness_holds():
    port = free_ports(1)
    stores = HeldStores()
    held = stores.hold(f"127.0.0.1:{port}", "J-job0", 3)
    assert held is not None and stores.hold(f"127.0.0.1:{port}", "J-job0", 3) is None  # one holder per port
    assert HeldStore.bind("rankcheck-elsewhere.invalid:29500", "J-job0", 3) is None  # another machine's
    nodes = [NodesDone(f"127.0.0.1:{port}", "J-job0", 3) for _ in range(3)]
    nodes[0].mark()
    nodes[0].mark()
    assert not nodes[0].all_done()
    nodes[1].mark()
    assert not nodes[2].all_done()
    assert not held.finished(time.monotonic())
    stores.release_finished()
    assert stores.held == [held]  # still needed: kept
    nodes[2].mark()
    assert all(n.all_done() for n in nodes)
    assert not NodesDone(f"127.0.0.1:{port}", "J-job1", 3).all_done()  # another job's counter
    # every node is done, but an agent may still shut its rendezvous down in the store: kept until each is gone
    assert not held.finished(time.monotonic())
    for node in nodes[:2]:
        node.mark_exited()
        node.mark_exited()
    assert not held.finished(time.monotonic())
    nodes[2].mark_exited()
    assert held.finished(time.monotonic())
    stores.release_all()
    assert stores.held == []


def test_a_held_store_is_released_at_its_deadline_though_a_node_never_said_it_was_done():
    stores = HeldStores()
    held = stores.hold(f"127.0.0.1:{free_ports(1)}", "J-job0", 2)
    held.deadline = time.monotonic() + 0.5
    started = time.monotonic()
    stores.release_all()
    assert stores.held == [] and time.monotonic() - started >= 0.4  # held until its deadline, then released


def test_a_store_that_is_gone_answers_nothing_quickly(monkeypatch):
    import torch.distributed

    attempts = []
    real = torch.distributed.TCPStore

    def counted(*args, **kwargs):
        """The real client, each attempt and its timeout recorded."""
        attempts.append(kwargs.get("timeout"))
        return real(*args, **kwargs)
    monkeypatch.setattr(torch.distributed, "TCPStore", counted)
    gone = NodesDone(f"127.0.0.1:{free_ports(1)}", "J-job0", 2)
    gone.mark()
    assert not gone.marked and not gone.all_done()
    # one failed connection, bounded by CONNECT_TIMEOUT_S, then no retry for a while
    assert [t.total_seconds() for t in attempts] == [CONNECT_TIMEOUT_S]
