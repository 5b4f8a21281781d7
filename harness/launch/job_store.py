"""The c10d store of a multi-node job: held by a harness, not by a torchrun agent; and who is done with it.

torchrun's c10d rendezvous keeps its store in whichever agent on the
endpoint's machine binds the port first, and every other agent and every
worker (``MASTER_ADDR``/``MASTER_PORT``) talks to it. When that agent is
the one the watchdog ends (its node's group hung), the store goes with it,
and every other node's agent dies at its next look at the store, taking
cases that were running fine down with it. So with several nodes the
harness holds each job's store itself (``HeldStore``: the harness on the
endpoint's machine binds ``Rendezvous.job_endpoint(i)`` before starting its
agent; on one host the first harness to bind it wins), and every agent is
told it is not the host (``--rdzv-conf is_host=false``).

The harness must then keep the store until no agent of the job uses it any
more, whichever node finishes last. torchrun's agents wait for each other
in an exit barrier (up to 300 s) that an ended agent never reaches, and an
agent that leaves by itself still writes to the store afterwards (it shuts
its rendezvous down); an agent still waiting in the barrier, or shutting
down, when the store closes leaves a traceback in its node's log. So each
node's job runner says up to three things in the job's store, each once,
each an ``add`` on a counter under a key of the job's own:

1. ``NodesDone.mark_missed`` (``rankcheck/<rdzv id>/missed``): its agent
   did not leave by itself (its watchdog ended it, or its workers failed),
   so it never reaches torchrun's exit barrier and every other node's agent
   would wait there for it; said before the next one, so that a node that
   reads every node done (``all_done``) and then ``any_missed`` cannot miss it.
2. ``NodesDone.mark`` (``rankcheck/<rdzv id>/done``): its node needs nothing
   more from the job (its cases are all settled, or its agent is gone). A
   node whose cases are all settled ends its agent waiting in the barrier
   as soon as some node has missed it (``any_missed``); once every node is
   done and none missed, every agent passes the barrier and shuts its
   rendezvous down by itself, unsignalled (``harness.launch.jobs``).
3. ``NodesDone.mark_exited`` (``rankcheck/<rdzv id>/exited``): its agent's
   process tree is gone (it left by itself, or its harness ended it).

The holder closes the store (``HeldStores``) once every node has said the
third, or at the job's last deadline (``harness.launch.job_clock.JobClock.agents_gone_by``:
every node's agent has left the barrier or its shutdown by then), whichever
comes first: its own node may finish first and go on to the next job; the
store waits for the other nodes' agents, an event, not a grace period.

A store that cannot be reached answers nothing (the caller keeps its
deadline); a failed connection is not retried for ``RETRY_S``, so a poll
never waits on it more than once in a while (the exited mark, a node's last
word, tries once more regardless).
"""

from __future__ import annotations

import socket
import time
from datetime import timedelta

CONNECT_TIMEOUT_S = 2.0
RETRY_S = 5.0
# torchrun's agents give store operations this long (its c10d backend's read_timeout default)
STORE_TIMEOUT_S = 60.0


def done_key(job_id: str) -> str:
    """The key of a job's done-counter in its store (nodes whose cases are settled)."""
    return f"rankcheck/{job_id}/done"


def exited_key(job_id: str) -> str:
    """The key of a job's exited-counter in its store (nodes whose agent is gone)."""
    return f"rankcheck/{job_id}/exited"


def missed_key(job_id: str) -> str:
    """The key of a job's missed-counter in its store (nodes whose agent never reaches torchrun's exit barrier)."""
    return f"rankcheck/{job_id}/missed"


def split_endpoint(endpoint: str) -> tuple[str, int | None]:
    """``host:port`` as (host, port); the port is None when the endpoint has none."""
    host, _, port = endpoint.rpartition(":")
    return (host, int(port)) if port.isdigit() else (endpoint, None)


def on_this_machine(host: str) -> bool:
    """Whether ``host`` names this machine (as torchrun decides which agent may host its store)."""
    try:
        from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname  # noqa: PLC0415 - torch: multi-node only
    except ImportError:
        return host in ("localhost", "127.0.0.1", socket.gethostname(), socket.getfqdn())
    return _matches_machine_hostname(host)


class NodesDone:
    """The missed-, done- and exited-counters of one multi-node job in its c10d store at ``endpoint`` (``host:port``)."""

    def __init__(self, endpoint: str, job_id: str, nnodes: int) -> None:
        self.host, self.port = split_endpoint(endpoint)
        self.key, self.exited_key, self.missed_key = done_key(job_id), exited_key(job_id), missed_key(job_id)
        self.nnodes = nnodes
        self.marked = False
        self.exited = False
        self.missed = False
        self._store = None
        self._failed_at: float | None = None

    def _connect(self):
        """The store client, connected on first use (None while it cannot be reached)."""
        if self._store is not None or self.port is None:
            return self._store
        if self._failed_at is not None and time.monotonic() - self._failed_at < RETRY_S:
            return None
        try:
            from torch.distributed import TCPStore  # noqa: PLC0415 - torch: multi-node only

            self._store = TCPStore(self.host, self.port, is_master=False, wait_for_workers=False,
                                   timeout=timedelta(seconds=CONNECT_TIMEOUT_S))
        except Exception:  # noqa: BLE001 - the store is gone or not up: nothing can be counted
            self._failed_at = time.monotonic()
        return self._store

    def _add(self, key: str, amount: int) -> int | None:
        """``add`` on the counter ``key`` (None when the store cannot be reached)."""
        store = self._connect()
        if store is None:
            return None
        try:
            return int(store.add(key, amount))
        except Exception:  # noqa: BLE001 - the store went away meanwhile
            self._store, self._failed_at = None, time.monotonic()
            return None

    def mark(self) -> None:
        """Count this node as done with the job (once; nothing happens when the store is gone)."""
        if not self.marked and self._add(self.key, 1) is not None:
            self.marked = True

    def mark_exited(self) -> None:
        """Count this node's agent as gone (once, after its process tree ended; one more connection attempt)."""
        self._failed_at = None
        if not self.exited and self._add(self.exited_key, 1) is not None:
            self.exited = True

    def mark_missed(self) -> None:
        """Count this node's agent as one that never reaches torchrun's exit barrier (once; before ``mark``)."""
        if not self.missed and self._add(self.missed_key, 1) is not None:
            self.missed = True

    def any_missed(self) -> bool:
        """Whether some node's agent never reaches the exit barrier (False when the store cannot tell)."""
        count = self._add(self.missed_key, 0)
        return count is not None and count > 0

    def all_done(self) -> bool:
        """Whether every node of the job has said it is done (False when the store cannot tell)."""
        count = self._add(self.key, 0)
        return count is not None and count >= self.nnodes


class HeldStore:
    """A job's c10d store, served by this harness process until every node's agent is gone or its deadline passes."""

    def __init__(self, server, job_id: str, nnodes: int) -> None:
        self.server = server
        self.key = exited_key(job_id)
        self.nnodes = nnodes
        self.deadline: float | None = None  # monotonic; None while the job runs here

    @classmethod
    def bind(cls, endpoint: str, job_id: str, nnodes: int) -> "HeldStore | None":
        """Serve the job's store at ``endpoint`` when it is this machine's and the port is free, else None."""
        host, port = split_endpoint(endpoint)
        if port is None or not on_this_machine(host):
            return None
        try:
            from torch.distributed import TCPStore  # noqa: PLC0415 - torch: multi-node only

            server = TCPStore(host, port, is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=STORE_TIMEOUT_S))
        except Exception:  # noqa: BLE001 - another harness of this machine holds it (one host, several nodes)
            return None
        return cls(server, job_id, nnodes)

    def finished(self, now: float) -> bool:
        """Whether no agent uses the store any more: every node said its agent is gone, or the job's last deadline
        has passed."""
        if self.deadline is not None and now > self.deadline:
            return True
        try:
            return int(self.server.add(self.key, 0)) >= self.nnodes
        except Exception:  # noqa: BLE001 - a store that cannot answer is no use to anyone
            return True


class HeldStores:
    """The stores this harness holds for its jobs: closed as their jobs finish everywhere, and before it exits."""

    def __init__(self) -> None:
        self.held: list[HeldStore] = []

    def hold(self, endpoint: str, job_id: str, nnodes: int) -> HeldStore | None:
        """Serve one more job's store (None when another process holds it or it is another machine's)."""
        store = HeldStore.bind(endpoint, job_id, nnodes)
        if store is not None:
            self.held.append(store)
        return store

    def release_finished(self) -> None:
        """Close every store no node needs any more."""
        now = time.monotonic()
        self.held = [s for s in self.held if not s.finished(now)]

    def release_all(self, poll_s: float = 0.2) -> None:
        """Wait until every held store is finished (each has a deadline once its job ended here), then close them."""
        while self.held:
            self.release_finished()
            if self.held and all(s.deadline is not None for s in self.held):
                time.sleep(poll_s)
            elif self.held:
                self.held = []  # a job that never ended here has no deadline: nothing to wait for


__all__ = ["HeldStore", "HeldStores", "NodesDone", "done_key", "exited_key", "missed_key", "on_this_machine",
           "split_endpoint"]
