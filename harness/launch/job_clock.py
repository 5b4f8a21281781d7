"""The clock of one job on this node: its budget, the time its ranks spent on references, and when others are done.

A job's budget is the startup allowance plus every case's budget plus one
per-case allowance (``cap``); the startup allowance counts from when the
other nodes can join (``job_started``: they may still be ending the last
job). Time during which a rank computes an unsharded reference with a fresh
heartbeat (``paused``) is not the job's time. With several nodes, a node
whose cases are all settled keeps its torchrun agent until some node's
agent has missed torchrun's exit barrier, or no node's case may still run
(``others_done_by``: from the first case's start, every budget, the paused
time and ``EXIT_BARRIER_MARGIN_S``). Once every node has said it is done
(``all_done_at``) and none missed, the agent passes the barrier and shuts
its rendezvous down by itself; it gets ``AGENT_SHUTDOWN_S`` for that from
when its workers have all exited (``agent_alone_at``; from ``all_done_at``
while they have not), and the store's holder keeps the job's store until
every node's agent is gone or ``agents_gone_by``, whichever comes first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from contracts.deadlines import AGENT_SHUTDOWN_S

# How long past every case's budget a node whose cases are all settled keeps its agent for the other nodes'
# (in torchrun's exit barrier): time for their watchdogs to end theirs first.
EXIT_BARRIER_MARGIN_S = 10.0


@dataclass
class JobClock:
    """One job's times (monotonic seconds): its start, budgets, the paused reference time and the first case's start."""

    job_started: float
    budgets: float  # the sum of the job's case budgets
    cap: float  # the job's budget: startup allowance + budgets + one case allowance
    startup_s: float
    last_poll: float = field(default_factory=time.monotonic)
    paused: float = 0.0
    first_case: float | None = None
    all_done_at: float | None = None  # when every node said it was done with the job
    agent_alone_at: float | None = None  # when this node's agent was first seen without workers, all nodes done
    agent_shutdown_s: float = AGENT_SHUTDOWN_S

    def poll(self, now: float) -> float:
        """Seconds since the previous poll (and this poll's time kept)."""
        since, self.last_poll = now - self.last_poll, now
        return since

    def case_began(self, at: float) -> None:
        """Keep when the job's first case began (the first call wins)."""
        if self.first_case is None:
            self.first_case = at

    def out_of_budget(self, now: float) -> bool:
        """Whether the job ran past its budget, less the paused reference time."""
        return now - self.job_started - self.paused > self.cap

    def others_done_by(self) -> float:
        """When every node's cases of the job have ended or run out of time (no node's may run longer)."""
        first = self.first_case if self.first_case is not None else self.job_started + self.startup_s
        return first + self.budgets + self.paused + EXIT_BARRIER_MARGIN_S

    def shutdown_deadline(self) -> float | None:
        """When this node's agent, past the exit barrier, has had its ``agent_shutdown_s`` to leave by itself (None
        until every node said it was done)."""
        if self.all_done_at is None:
            return None
        started = self.agent_alone_at if self.agent_alone_at is not None else self.all_done_at
        return started + self.agent_shutdown_s

    def agents_gone_by(self) -> float:
        """When every node's agent has left the job's store at the latest: each waits in the exit barrier until no
        node's case may still run, then has ``agent_shutdown_s`` to shut its rendezvous down."""
        return self.others_done_by() + self.agent_shutdown_s
