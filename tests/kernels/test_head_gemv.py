"""kernels/markov_fused/head_gemv*.py on the CPU: where the GEMV applies, configuration errors before anything
touches a GPU, and its PTX: two tiles in flight per warp (cp.async, wait_group 1), the 16-MMA chain per tile
at dim 256, the L2 policy and the PDL instructions only in the variants that ask for them."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")


def _ptx(**config) -> str:
    """The PTX of one ``HeadGemvKernel`` variant."""
    import cutlass.cute as cute
    from cutlass import Int32, Int64

    from kernels.markov_fused.head_gemv_kernel import HeadGemvKernel

    args = [Int64(0)] * 4 + [Int32(1)] * 3 + [cute.runtime.make_fake_stream()]
    text = cute.compile(HeadGemvKernel(**config), *args, options="--keep-ptx --gpu-arch sm_90a").artifacts.PTX
    return text if isinstance(text, str) else text.decode()


def test_supports_and_config_errors():
    from kernels.markov_fused.head_gemv import MAX_DIM, supports
    from kernels.markov_fused.head_gemv_kernel import HeadGemvKernel, shared_bytes

    assert supports(256, 129280) and supports(32, 16) and supports(MAX_DIM, 16160)
    assert not supports(64 + 16, 129280) and not supports(MAX_DIM + 32, 16) and not supports(256, 129281)
    assert shared_bytes(256) == 8 * 256 * 2 + 8 * 2 * 16 * 512
    assert shared_bytes(MAX_DIM) <= 227 * 1024  # the H200's shared memory per CTA
    for bad in (48, 0, MAX_DIM + 32, True):
        with pytest.raises(ValueError, match="dim"):
            HeadGemvKernel(bad)
    with pytest.raises(ValueError, match="l2_keep"):
        HeadGemvKernel(256, l2_keep=2.0)
    with pytest.raises(TypeError, match="pdl"):
        HeadGemvKernel(256, pdl=1)


def test_ptx_streams_two_tiles_per_warp_and_adds_policy_and_pdl_on_request():
    plain, tuned = _ptx(dim=256), _ptx(dim=256, l2_keep=0.5, pdl=True)
    for text in (plain, tuned):
        assert "cp.async.wait_group 1;" in text and "cp.async.commit_group;" in text
        # Two prologue tiles and the loop's refill: 16 copies each at dim 256.
        assert text.count("cp.async.cg.shared.global") == 3 * 16
        assert text.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 16
        assert "cvt.rn.bf16x2.f32" in text and "st.global.b16" in text
    assert "createpolicy" not in plain and "griddepcontrol" not in plain
    assert "createpolicy.fractional.L2::evict_last.L2::evict_first.b64" in tuned
    assert "griddepcontrol.wait" in tuned and "griddepcontrol.launch_dependents" in tuned
