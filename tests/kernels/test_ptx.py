"""kernels/ptx.py on the CPU: bad orderings are rejected before any IR is
built, and every generic helper assembles (ptxas) for sm_90a inside one
small kernel, with the instruction it promises in the PTX."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

import cuda.bindings.driver as cuda  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass import Float32, Int32, Int64, Uint32  # noqa: E402

from kernels import ptx  # noqa: E402


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: ptx.ld_ordered_b32(Int64(0), "release", "gpu"), "relaxed or acquire"),
        (lambda: ptx.ld_ordered_b32(Int64(0), "acquire", "device"), "scope must be one of"),
        (lambda: ptx.st_ordered_b32(Int64(0), Uint32(0), "acquire", "sys"), "relaxed or release"),
        (lambda: ptx.atom_add_u32(Int64(0), Uint32(1), "seq_cst", "gpu"), "semantics must be one of"),
        (lambda: ptx.fence("membar.device"), "fence must be one of"),
        (lambda: ptx.ld_global_nc(Int64(0), 32, Int32(1)), "2, 4, 8 or 16 bytes"),
    ],
)
def test_bad_orderings_rejected(call, message):
    with pytest.raises(ValueError, match=message):
        call()


class _EveryHelper:
    """One kernel touching every generic helper once (compile-only)."""

    @cute.jit
    def __call__(self, buf: Int64, stream: cuda.CUstream) -> None:
        self.kernel(buf).launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)

    @cute.kernel
    def kernel(self, buf: Int64) -> None:
        tidx, _, _ = cute.arch.thread_idx()
        first = Int32(tidx == 0)
        words = ptx.ld_global_nc(buf, 16, first)
        more = ptx.ld_global(buf + 16, 8, first)
        half = ptx.ld_global_nc(buf + 24, 2, first)
        flag = ptx.ld_ordered_b32(buf + 32, "acquire", "sys")
        relaxed = ptx.ld_ordered_b64(buf + 40, "relaxed", "gpu")
        ticket = ptx.atom_add_u32(buf + 48, Uint32(1), "acq_rel", "gpu")
        value, index = ptx.shfl_bfly_pair(Float32(1.5), Int32(tidx), 16)
        lane = ptx.shfl_bfly_b32(Uint32(tidx), 1)
        t = ptx.globaltimer()
        ptx.st_global(buf + 64, words, 16, first)
        ptx.st_global(buf + 80, more, 8, first)
        ptx.st_global(buf + 88, half, 2, first)
        ptx.st_global_b64(buf + 96, t + relaxed, first)
        ptx.st_ordered_b32(buf + 104, flag + ticket + lane + Uint32(index), "release", "gpu")
        ptx.st_ordered_b64(buf + 112, Int64(ptx.f32_bits(value)), "relaxed", "sys")
        ptx.fence("membar.sys")
        ptx.fence("fence.acq_rel.sys")
        v = ptx.ld_volatile_b32_or(buf + 120, first, Uint32(7))
        ptx.st_shared_b32(Int32(0), v)
        ptx.st_global(buf + 124, [ptx.ld_shared_b32(Int32(0))], 4, first)
        ptx.trap()


def test_every_helper_assembles_for_sm90a():
    compiled = cute.compile(_EveryHelper(), Int64(0), cute.runtime.make_fake_stream(), options="--keep-ptx --gpu-arch sm_90a")
    text = compiled.artifacts.PTX
    text = text if isinstance(text, str) else text.decode()
    for instruction in (
        "ld.global.nc.v4.b32", "ld.global.v2.b32", "ld.global.nc.b16", "ld.acquire.sys.global.b32",
        "ld.relaxed.gpu.global.b64", "atom.add.acq_rel.gpu.global.u32", "shfl.sync.bfly.b32",
        "%globaltimer", "st.global.v4.b32", "st.global.v2.b32", "st.global.b16", "st.global.b64",
        "st.release.gpu.global.b32", "st.relaxed.sys.global.b64", "membar.sys", "fence.acq_rel.sys",
        "ld.volatile.global.b32", "st.shared.b32", "ld.shared.b32", "trap",
    ):
        assert instruction in text, instruction
