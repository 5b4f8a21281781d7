"""``harness.bench.cases.virtual``'s fork and join on the CPU: stand-in streams record which waits which, so the
lockstep of ``launch_ranks`` and the once-only fork and join of ``rank_chains`` can be read off."""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

from harness.bench.cases import virtual  # noqa: E402 - after the importorskip


class _Stream:
    """A stand-in CUDA stream that logs each ``wait_stream`` as (waiter, waited)."""

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: "_Stream") -> None:
        self.log.append((self.name, other.name))


class _Fabric:
    """A stand-in virtual rank: only its stream matters here."""

    def __init__(self, name: str, log: list) -> None:
        self.stream = _Stream(name, log)


@pytest.fixture
def ranks(monkeypatch):
    """Two stand-in ranks, the origin stream made current, ``torch.cuda.stream`` a no-op; (ranks, log, calls)."""
    log, calls = [], []
    origin = _Stream("origin", log)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: origin)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    return [(_Fabric("r0", log), None), (_Fabric("r1", log), None)], log, calls


FORK = [("r0", "origin"), ("r1", "origin")]
JOIN = [("origin", "r0"), ("origin", "r1")]


def test_each_call_is_forked_and_joined_in_lockstep(ranks):
    pair, log, calls = ranks
    for step in range(2):
        virtual.launch_ranks(pair, lambda rank, _: calls.append((step, rank)))
    assert log == FORK + JOIN + FORK + JOIN and calls == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_inside_rank_chains_the_calls_are_forked_and_joined_once(ranks):
    pair, log, calls = ranks
    with virtual.rank_chains(pair):
        for step in range(3):
            virtual.launch_ranks(pair, lambda rank, _: calls.append((step, rank)))
        assert log == FORK  # no wait between calls: each rank's calls are back to back on its stream
    assert log == FORK + JOIN and len(calls) == 6
    virtual.launch_ranks(pair, lambda rank, _: None)  # after the block: lockstep again
    assert log == FORK + JOIN + FORK + JOIN


def test_a_chain_inside_a_chain_of_the_same_ranks_is_refused_and_the_outer_one_still_joins(ranks):
    pair, log, _ = ranks
    with pytest.raises(RuntimeError, match="already inside a chain"):
        with virtual.rank_chains(pair):
            with virtual.rank_chains(pair):
                pass
    assert log == FORK + JOIN and not virtual._CHAINED
