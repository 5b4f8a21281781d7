"""kernels/markov_fused/host.py on the CPU: variant rules (vector vs scalar from
alignment, finishing warps, row-copy width), configuration errors raised
before anything touches a GPU, and the step kernel's PTX (ordering and the
instructions of the contract) for a representative variant."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from harness.families.markov_fused import kernel as driver  # noqa: E402
from kernels.markov_fused import host as fused  # noqa: E402

CONFIG = dict(vocab=4096, dim=64, tp=1, max_reqs=4, has_cap=False, mult=1.0, cap=30.0, inv_cap=1 / 30, block=512)


def test_vector_bytes_only_for_8_or_16_byte_groups():
    assert [fused.vector_bytes(b) for b in fused.BLOCK_SIZES] == [0, 0, 8, 16, 0, 0]


def test_block_sizes_are_the_seeds_powers_of_two_and_every_one_is_gated():
    """The seed takes any power of two from 128 (a multiple of the 128 threads); these are compiled and gated."""
    assert fused.BLOCK_SIZES == tuple(128 << i for i in range(6))
    names = [name for name, _thunk, _spill in fused.compile_variants("sm_90a")]
    for block in fused.BLOCK_SIZES:
        assert any(name.startswith(f"markov.step[b{block},") for name in names), block
    with pytest.raises(ValueError, match=r"^block must be one of \(128, .*4096\), got 8192"):
        fused.compile_step(block=8192, blocks=1, vector=False, has_cap=False, sharded=False, pdl=False,
                           row_bytes=128, chunk=4, w1_rows=64)


def test_operand_is_a_bf16_tensors_address_and_strides():
    cache = torch.zeros(3, 4, 64, dtype=torch.bfloat16)[:, 1]
    operand = fused.Operand.of(cache)
    assert operand._fields == ("address", "strides")
    assert operand == (cache.data_ptr(), (256, 1)) and operand.address == cache.data_ptr()
    with pytest.raises(ValueError, match=r"^Operand.of: expected a BF16 tensor, got torch.float32"):
        fused.Operand.of(torch.zeros(4))


ROW = fused.Operand(256, (4096, 1))
CACHE = fused.Operand(1024, (16384, 4096, 1))


@pytest.mark.parametrize(
    "change, expected",
    [
        ({}, True),
        ({"base": fused.Operand(258, (4096, 1))}, False),  # base pointer off by one element
        ({"bias": fused.Operand(256, (4099, 1))}, False),  # odd row stride
        ({"width": 4090}, False),  # width not whole groups
        ({"cache": fused.Operand(1024, (16384, 4099, 1))}, True),  # step 0: the odd step stride adds nothing
        ({"cache": fused.Operand(1024, (16384, 4099, 1)), "col": 1}, False),  # step 1 starts mid-group
        ({"cache": fused.Operand(1032, (16384, 4096, 1))}, False),  # 8 bytes: half a 16-byte group
    ],
)
def test_vectorized_needs_every_group_aligned(change, expected):
    args = {**dict(width=4096, col=0, base=ROW, bias=ROW, cache=CACHE), **change}
    assert fused.vectorized(1024, **args) is expected
    assert fused.vectorized(256, **args) is False  # 2 elements a thread: never one access


def test_vectorized_groups_are_a_threads_elements():
    """Block 512 moves 4 elements (8 bytes) a thread, 1024 moves 8 (16 bytes): an 8-byte-aligned cache suffices
    for the first only."""
    args = dict(width=4096, col=0, base=ROW, bias=ROW, cache=fused.Operand(1032, (16384, 4096, 1)))
    assert fused.vectorized(512, **args) and not fused.vectorized(1024, **args)
    assert fused.vectorized(512, **{**args, "width": 4092}) and not fused.vectorized(512, **{**args, "width": 4094})


def test_fill_vectorized_needs_16_byte_everything():
    args = dict(gathered=256, src_s0=8192, cache=fused.Operand(1024, (8192, 4096, 1)), shard=512, vocab=4096)
    assert fused.fill_vectorized(**args)
    for change in ({"shard": 500}, {"vocab": 4004}, {"src_s0": 8196}, {"gathered": 258},
                   {"cache": fused.Operand(1032, (8192, 4096, 1))}, {"cache": fused.Operand(1024, (8193, 4096, 1))},
                   {"cache": fused.Operand(1024, (8192, 4095, 1))}):
        assert not fused.fill_vectorized(**{**args, **change}), change
    with pytest.raises(TypeError):
        fused.fill_vectorized(256, 8192, args["cache"], 512, 4096)  # keywords only, as the seed's


def test_copy_chunk_within_a_threads_share_and_every_tensors_alignment():
    assert fused.finish_warps(128) == 1 and fused.finish_warps(129) == 4
    buffer = torch.zeros(512, dtype=torch.uint8)
    aligned = buffer[(-buffer.data_ptr()) % 16:]
    assert aligned.data_ptr() % 16 == 0
    assert fused.copy_chunk(512, 32) == 16  # no tensor: the share alone
    assert fused.copy_chunk(512, 32, aligned, aligned[32:]) == 16
    assert fused.copy_chunk(512, 128, aligned) == 4  # a thread's share is 4 bytes
    assert fused.copy_chunk(64, 128, aligned) == 2  # a row narrower than the threads: 2
    assert fused.copy_chunk(200, 32, aligned) == 4  # 8 divides 200 but exceeds a 6-byte share
    assert fused.copy_chunk(512, 32, aligned, aligned[8:]) == 8  # the least aligned tensor decides
    assert fused.copy_chunk(512, 32, aligned[2:]) == 2  # misaligned table


def test_compile_step_compiles_the_seeds_variant_once():
    """The seed's keywords compile one ``StepKernel`` through ``compile_kernel`` (cached by configuration),
    without the flight recorder, as the seed's functions; here block 4096, the largest."""
    config = dict(block=4096, blocks=2, vector=False, has_cap=False, sharded=True, pdl=False, row_bytes=128,
                  chunk=4, w1_rows=64)
    options = "--keep-ptx --gpu-arch sm_90a"
    kernel = fused.compile_step(**config, options=options)
    assert fused.compile_step(**config, options=options) is kernel
    assert fused.compile_kernel(fused.StepKernel, options, **config, flight=False) is kernel
    text = kernel.artifacts.PTX
    text = text if isinstance(text, str) else text.decode()
    # No flight recorder: no timer read and no ring; the 32 elements of a thread are scalar BF16 loads.
    assert "%globaltimer" not in text and "ld.global.nc.b16" in text


@pytest.mark.parametrize(
    "change, exc, message",
    [
        ({"block": 384}, ValueError, "config.block"),
        ({"tp": 3}, ValueError, "config.tp"),
        ({"vocab": 0}, ValueError, "config.vocab"),
        ({"max_reqs": 0}, ValueError, "config.max_reqs"),
        ({"mult": "1"}, TypeError, "config.mult"),
    ],
)
def test_config_errors_name_the_key(change, exc, message):
    with pytest.raises(exc, match=message):
        driver.FusedMarkovLoop(None, {}, {**CONFIG, **change})


def test_missing_config_and_bad_world():
    with pytest.raises(ValueError, match=r"config: missing keys \['block'\]"):
        driver.FusedMarkovLoop(None, {}, {k: v for k, v in CONFIG.items() if k != "block"})
    with pytest.raises(TypeError, match=r"^fabric: expected a kernels.fabric provider"):
        driver.FusedMarkovLoop(object(), {}, CONFIG)

    class Two:
        rank, world = 0, 2

    with pytest.raises(ValueError, match="world 2 != config.tp 1"):
        driver.FusedMarkovLoop(Two(), {}, CONFIG)


def test_cpu_weights_rejected():
    w = torch.zeros(4096, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="static.w1: expected a CUDA tensor"):
        driver.FusedMarkovLoop(None, {"w1": w, "w2": w}, CONFIG)


def test_step_ptx_orders_and_instructions():
    kernel = fused.compile_kernel(
        fused.StepKernel, "--keep-ptx --gpu-arch sm_90a", block=1024, blocks=4, vector=True, has_cap=True,
        sharded=False, pdl=True, row_bytes=128, chunk=4, w1_rows=4096,
    )
    text = kernel.artifacts.PTX
    text = text if isinstance(text, str) else text.decode()
    for instruction in ("ld.global.nc.v4.b32", "st.global.v4.b32", "griddepcontrol.wait", "add.rn.bf16",
                        "ex2.approx.ftz.f32", "rcp.approx.ftz.f32", "div.full.f32", "shf.l.wrap.b32",
                        "atom.add.acq_rel.gpu.global.u32", "ld.volatile.global.b32", "min.u64"):
        assert instruction in text, instruction
    # The bias (the GEMV's output) is read only after the dependency wait,
    # through the coherent path.
    wait = text.index("griddepcontrol.wait")
    assert "ld.global.v4.b32" in text[wait:] and "ld.global.v4.b32" not in text[:wait]
    assert text.index("atom.add.acq_rel.gpu") > text.rindex("st.global.b64", 0, text.index("atom.add.acq_rel.gpu"))


def _step_ptx(stamps: bool) -> str:
    """The PTX of one PDL step variant, with or without the phase stamps."""
    kernel = fused.compile_kernel(
        fused.StepKernel, "--keep-ptx --gpu-arch sm_90a", block=1024, blocks=4, vector=True, has_cap=False,
        sharded=False, pdl=True, row_bytes=128, chunk=4, w1_rows=4096, stamps=stamps,
    )
    text = kernel.artifacts.PTX
    return text if isinstance(text, str) else text.decode()


def test_step_stamps_are_a_separate_variant_storing_after_the_wait():
    """Off by default (same key as before the option); on, five timer reads and
    five predicated 64-bit stores, none before the PDL wait (the flight
    recorder's two timer reads are in both)."""
    from kernels.markov_fused.layout import STEP_STAMPS, step_scratch_slots

    config = dict(block=1024, blocks=4, vector=True, has_cap=False, sharded=False, pdl=True, row_bytes=128,
                  chunk=4, w1_rows=4096)
    assert fused.StepKernel(**config).key() == ("markov_step", 1024, 4, True, False, False, True, 128, 4, 4096)
    assert fused.StepKernel(**config, stamps=True).key()[-1] == "stamps"
    plain, stamped = _step_ptx(False), _step_ptx(True)
    assert plain.count("%globaltimer") == 2 and stamped.count("%globaltimer") == 2 + len(STEP_STAMPS)
    assert stamped.count("st.global.b64") == plain.count("st.global.b64") + len(STEP_STAMPS)
    wait = stamped.index("griddepcontrol.wait")
    assert "st.global" not in stamped[:wait]
    assert step_scratch_slots(8, 127, 8, False) == 8 * 127
    assert step_scratch_slots(8, 127, 8, True) == 8 * 127 * (1 + 8 * len(STEP_STAMPS))


def test_stamped_step_gate_variants_do_not_spill():
    from harness import compile_gate

    registry = [("kernels.markov_fused.host", fused.compile_variants)]
    results = compile_gate.run_gate(["sm_90a"], registry, name_filter=r",stamps\]$")
    assert len(results) == 2 and all(r.ok and not r.spilled for r in results), [r.verdict for r in results]


def test_loop_reads_each_slots_stamps_step_by_step():
    from kernels.markov_fused.layout import STEP_STAMPS, step_scratch_slots, step_stamp_names

    loop = object.__new__(driver.FusedMarkovLoop)
    rows, blocks, steps, phases = 2, 3, 2, len(STEP_STAMPS)
    loop.stamped, loop.blocks = True, blocks
    scratch = torch.zeros(step_scratch_slots(rows, blocks, steps, True), dtype=torch.int64)
    # The kernel's layout: [steps][rows * blocks][phases] after rows * blocks argmax slots.
    stamped = torch.arange(steps * rows * blocks * phases, dtype=torch.int64).view(steps, rows * blocks, phases)
    scratch[rows * blocks :] = stamped.flatten()
    loop._stamp_scratch = (rows, steps, scratch)
    names, values = loop.stamps()
    assert names == step_stamp_names(steps)
    assert values.shape == (rows * blocks, steps * phases)
    assert values[4].tolist() == stamped[0, 4].tolist() + stamped[1, 4].tolist()
