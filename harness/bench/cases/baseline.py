"""Baseline cases that check the method itself: a plain device copy should
run at its floor (bytes over the measured copy bandwidth), so its efficiency
tells how far the runner's numbers can be trusted."""

from __future__ import annotations

import torch

from harness.bench.registry import BenchContext, Prepared, bench_case


def _copy_case(nbytes: int):
    """A setup that copies ``nbytes`` from a rotated source into a rotated destination."""

    def setup(ctx: BenchContext) -> Prepared:
        """Input sets are (source, destination) pairs; a call reads one and writes the other."""
        elements = nbytes // 4

        def new_input_set():
            """One (source, destination) pair of fp32 buffers."""
            return (torch.randn(elements, device=ctx.device), torch.empty(elements, device=ctx.device))

        def launch(pair) -> None:
            """One copy kernel on the current stream."""
            pair[1].copy_(pair[0])

        return Prepared(bytes_moved=2 * nbytes, input_bytes=2 * nbytes, new_input_set=new_input_set, launch=launch)

    return setup


for _label, _bytes in (("copy_64k", 64 << 10), ("copy_4m", 4 << 20), ("copy_64m", 64 << 20)):
    bench_case(
        "baseline",
        _label,
        params={"bytes": _bytes},
        description=f"torch copy of {_bytes} bytes (read + write)",
    )(_copy_case(_bytes))
