"""golden.comm: ranks that call one collective with different shapes get a RuntimeError naming both, on every rank."""

from __future__ import annotations

import pytest
import torch

from golden.comm import CollectiveMismatch, ThreadWorld


def test_mismatched_all_gather_is_a_desynchronisation_named_on_every_rank():
    def body(comm):
        try:
            comm.all_gather(torch.zeros(2 + comm.rank, dtype=torch.int32))
        except CollectiveMismatch as exc:
            return str(exc)
        return "no error"

    messages = ThreadWorld(2, timeout_s=30).run(body)
    for message in messages:
        assert "rank 0 gave (2,)" in message and "rank 1 gave (3,)" in message, message
    assert issubclass(CollectiveMismatch, RuntimeError)


def test_matching_all_gather_stacks_by_rank():
    out = ThreadWorld(3, timeout_s=30).run(lambda comm: comm.all_gather(torch.full((2,), comm.rank)))
    for stacked in out:
        assert stacked.tolist() == [[0, 0], [1, 1], [2, 2]]
    with pytest.raises(ValueError):
        ThreadWorld(0)


def test_an_oversized_header_is_refused_by_name_not_truncated():
    from contracts.wire_header import HeaderTooLong, decode_header, encode_header

    assert decode_header(encode_header({"a": [1, 2]}, 64)) == {"a": [1, 2]}
    with pytest.raises(HeaderTooLong, match=r"the call: .* expected at most 60"):
        encode_header({"a": "x" * 100}, 64, "the call")
