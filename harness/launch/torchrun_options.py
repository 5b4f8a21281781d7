"""torchrun's node options for a run of one or more nodes, and what follows from them for this node.

The harness passes ``--nnodes``, ``--node-rank``, the rendezvous backend,
endpoint and id, and ``--nproc-per-node`` through to torchrun unchanged; the
job runner also derives from them which global ranks and TP groups this
node holds (it judges only those), the suffix that keeps its files apart
from the other nodes' in a shared run directory, the global rank its local
rank 0 must take, and each job's own rendezvous id and endpoint.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.wire.tp_groups import group_ids, group_ranks


@dataclass(frozen=True)
class Rendezvous:
    """torchrun's node options, passed through unchanged (defaults: one standalone node)."""

    nnodes: int = 1
    node_rank: int = 0
    backend: str | None = None
    endpoint: str | None = None
    id: str | None = None
    nproc_per_node: int | None = None

    def local_ranks(self, world: int) -> range:
        """The global ranks this node runs (all of them on one node)."""
        if self.nnodes == 1:
            return range(world)
        per_node = self.nproc_per_node or world // self.nnodes
        return range(self.node_rank * per_node, (self.node_rank + 1) * per_node)

    @property
    def node_suffix(self) -> str:
        """``.node<rank>`` for a node of a multi-node run (its files must not collide with the others'), else ``""``."""
        return f".node{self.node_rank}" if self.nnodes > 1 else ""

    @property
    def world(self) -> int | None:
        """The job's rank count the node options imply (``nnodes * nproc_per_node``), or None without ``--nproc-per-node``."""
        return self.nnodes * self.nproc_per_node if self.nproc_per_node else None

    def node_path(self, path: str | os.PathLike) -> str:
        """``path`` with ``node_suffix`` before its extension (``X.xml`` -> ``X.node3.xml``); unchanged on one node."""
        target = Path(path)
        return str(target.with_name(f"{target.stem}{self.node_suffix}{target.suffix}"))

    def first_rank(self, world: int) -> int | None:
        """The global rank this node's local rank 0 must take, with several nodes (None on one node).

        torchrun's c10d rendezvous ignores ``--node-rank`` and orders the
        agents its own way (by host name, then agent pid, anew for every
        job), while the harness names files, TP groups and logs after node
        ``k`` holding ranks ``local_ranks``; so the workers number themselves
        from this (``harness.rank.worker``). The store the workers meet in is the
        agent's, so no rank's number decides who serves it."""
        return self.local_ranks(world).start if self.nnodes > 1 else None

    def job_id(self, job_index: int) -> str:
        """The rendezvous id of job ``job_index`` (every node numbers its jobs alike)."""
        return f"{self.id or 'rankcheck'}-job{job_index}"

    def job_endpoint(self, job_index: int) -> str:
        """The rendezvous endpoint of job ``job_index``: ``host:port`` with the port moved up by the job number.

        The c10d store lives in the agent that bound the port first; a node whose
        job ended early starts the next job while another node's agent of the
        last one still holds the port (torchrun's exit barrier), and would join
        that dying store instead of the next job's. An endpoint without a port
        is used as given."""
        host, sep, port = (self.endpoint or "").rpartition(":")
        if not sep or not port.isdigit():
            return self.endpoint or ""
        return f"{host}:{int(port) + job_index}"

    def describe(self) -> dict:
        """This node in the job, as a report's provenance records it (what ``harness merge-reports`` checks)."""
        return {"rank": self.node_rank, "nnodes": self.nnodes, "nproc_per_node": self.nproc_per_node,
                "rdzv_id": self.id, "rdzv_endpoint": self.endpoint}

    def local_groups(self, world: int, tp: int) -> list[int | None]:
        """The TP groups holding at least one of this node's ranks (``[None]`` when one group spans the world).

        A node reports only these: the other groups' ranks ran elsewhere, and
        judging them from the results this node cannot see would call a case
        that ran nowhere here a pass."""
        ranks = self.local_ranks(world)
        return [g for g in group_ids(world, tp) if any(r in ranks for r in group_ranks(world, tp, g))]
