"""CPU tests of the sharded Markov sampler's host side (seed 000): the byte
layout and key encoding agree with the golden loop's, the argument checks
name the bad argument before anything changes, the compile-gate registry
lists every variant, and one variant compiles for sm_90a without spilling."""

from __future__ import annotations

import os
import re
import struct

import pytest
import torch

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

import golden.markov_sharded as golden  # noqa: E402
from contracts import markov_sharded as contract  # noqa: E402
from kernels.markov_sharded import layout  # noqa: E402
from kernels.markov_sharded.checks import check_call, check_config  # noqa: E402

CPU = torch.device("cpu")


def f32_bits(x: float) -> int:
    """The bits of ``x`` rounded to FP32."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def test_layout_constants_match_the_golden_and_the_seed():
    assert (layout.TAG_BITS, layout.TAG_PERIOD, layout.INDEX_BITS) == (contract.TAG_BITS, contract.TAG_PERIOD, contract.INDEX_BITS)
    assert (layout.MAX_ROWS, layout.MAX_STEPS, layout.MAX_RANKS, layout.HEAD_DIM) == (8, 8, 8, 256)
    assert layout.MAILBOX_BYTES == layout.STAGING_OFFSET == 8192
    assert (layout.ARRIVAL_WORD, layout.LAUNCH_WORD, layout.END_WORD) == (128, 136, 137)
    assert layout.record_offset(1, 7, 7, 7) + 8 == layout.MAILBOX_BYTES
    assert layout.record_offset(0, 0, 0, 1) == 8 and layout.record_offset(0, 0, 1, 0) == 64
    assert layout.staging_offset(1, 0, 0, 0, max_rows=3, steps=2, vocab=32, cache_bytes=2) == 8192 + 3 * 2 * 32 * 2
    assert layout.peer_buffer_bytes(max_rows=8, steps=8, vocab=129280, cache_bytes=4) == 8192 + 2 * 8 * 8 * 129280 * 4


@pytest.mark.parametrize("launches", [0, 1, 32766, 32767, 32768, 2**32 - 1])
def test_tags_match_the_golden(launches):
    assert layout.launch_tag(launches) == golden.launch_tag(launches)
    assert 1 <= layout.launch_tag(launches) <= layout.TAG_MASK


def test_keys_order_scores_as_the_golden():
    scores = torch.tensor([-float("inf"), -2.0, -0.0, 0.0, 1e-30, 3.5, float("inf"), float("nan")])
    keys = golden.candidate_keys(scores, 40).tolist()
    mine = [layout.candidate_key(f32_bits(float(s)), 40 + j) for j, s in enumerate(scores.tolist())]
    # torch's NaN is 0x7FC00000, not the GPU's canonical 0x7FFFFFFF; both order above +inf.
    assert mine == keys
    assert mine == sorted(mine)
    assert all(0 < k < 1 << layout.KEY_BITS for k in mine)
    assert layout.key_index(mine[3]) == 43
    record = layout.encode_record(mine[5], 77)
    assert layout.decode_record(record) == (mine[5], 77) == golden.decode_record(golden.encode_record(mine[5], 77))
    # Equal scores: the smaller index wins.
    assert layout.candidate_key(f32_bits(1.0), 5) > layout.candidate_key(f32_bits(1.0), 6)


def config(**overrides) -> dict:
    """A valid world-2 configuration with ``overrides``."""
    base = {"vocab": 2048, "world": 2, "steps": 2, "base_dtype": "bfloat16", "cache_dtype": "float32",
            "max_rows": 8, "max_reqs": 4}
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"world": 4}, r"config\['world'\]"),
        ({"vocab": 2040}, r"config\['vocab'\]"),
        ({"steps": 9}, r"config\['steps'\]"),
        ({"max_rows": 9}, r"config\['max_rows'\]"),
        ({"base_dtype": "float16"}, r"config\['base_dtype'\]"),
        ({"launch_counter_start": 2**32}, r"config\['launch_counter_start'\]"),
        ({"colour": 1}, r"config\['colour'\]"),
        ({"shard_only_base": 1}, r"config\['shard_only_base'\]"),
    ],
)
def test_bad_config_names_the_key(overrides, match):
    with pytest.raises((ValueError, TypeError), match=match):
        check_config(config(**overrides), 2)


def test_world_above_eight_is_refused():
    with pytest.raises(ValueError, match=r"config\['world'\]"):
        check_config(config(world=16, vocab=4096), 16)


def call(rows=3, steps=2, vocab=2048, max_reqs=4) -> tuple[dict, dict]:
    """Valid CPU call inputs for ``config()``."""
    return {
        "input_ids": torch.arange(rows, dtype=torch.int32),
        "idx_mapping": torch.arange(rows, dtype=torch.int64).repeat_interleave(steps),
        "temperature": torch.zeros(max_reqs, dtype=torch.float32),
        "noise": torch.zeros(rows * steps, vocab, dtype=torch.float32),
        "base_logits": torch.zeros(rows, steps, vocab, dtype=torch.bfloat16),
        "logits_cache": torch.zeros(max_reqs, steps, vocab, dtype=torch.float32),
    }, {"query_per_row": 1}


def test_a_valid_call_passes_with_the_shard_column():
    cfg = check_config(config(), 2)
    inputs, params = call()
    args = check_call(cfg, 1, CPU, inputs, params, capturing=False)
    assert (args.rows, args.base_column) == (3, 1024)
    shard_cfg = check_config(config(shard_only_base=True), 2)
    inputs["base_logits"] = torch.zeros(3, 2, 1024, dtype=torch.bfloat16)
    assert check_call(shard_cfg, 1, CPU, inputs, params, capturing=False).base_column == 0


def _broken(name: str):
    """Call inputs with one argument broken, and the pattern its error must match."""
    inputs, params = call()
    if name == "cache_dtype":
        inputs["logits_cache"] = inputs["logits_cache"].half()
        return inputs, params, "logits_cache"
    if name == "noise_shape":
        inputs["noise"] = inputs["noise"][:, :100]
        return inputs, params, "noise"
    if name == "cache_stride":
        inputs["logits_cache"] = torch.zeros(4, 2, 2050)[:, :, 1:2049]
        return inputs, params, "logits_cache"
    if name == "base_stride":
        inputs["base_logits"] = torch.zeros(3, 2048, 2, dtype=torch.bfloat16).transpose(1, 2)
        return inputs, params, "base_logits"
    if name == "anchor":
        inputs["input_ids"][2] = 2048
        return inputs, params, "input_ids"
    if name == "request":
        inputs["idx_mapping"][1] = 4
        return inputs, params, "idx_mapping"
    if name == "duplicate":
        inputs["idx_mapping"][:] = 0
        return inputs, params, "idx_mapping"
    if name == "rows":
        return inputs, {"query_per_row": 1, "rows": 9}, "rows"
    if name == "steps":
        return inputs, {"query_per_row": 1, "steps": 3}, "steps"
    if name == "query":
        return inputs, {}, "query_per_row"
    if name == "missing":
        del inputs["temperature"]
        return inputs, params, "temperature"
    if name == "ids_short":
        return inputs, {"query_per_row": 2}, "input_ids"
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["cache_dtype", "noise_shape", "cache_stride", "base_stride", "anchor", "request",
                                  "duplicate", "rows", "steps", "query", "missing", "ids_short"])
def test_bad_call_names_the_argument(name):
    cfg = check_config(config(), 2)
    inputs, params, match = _broken(name)
    with pytest.raises((ValueError, TypeError), match=match):
        check_call(cfg, 0, CPU, inputs, params, capturing=False)


def test_compile_registry_lists_every_variant():
    from kernels.markov_sharded import host as sharded

    variants = sharded.compile_variants("sm_90a")
    names = [name for name, _, _ in variants]
    assert len(names) == len(set(names)) == 8 * 4 + len(sharded.STAMPED_GATE_VARIANTS) + 1  # + noflight
    assert all(must_not_spill for _, _, must_not_spill in variants)
    assert "markov_sharded.sample[s8,float32/bfloat16]" in names
    assert "markov_sharded.sample[s8,bfloat16/bfloat16,stamps]" in names


@pytest.mark.parametrize("name", ["markov_sharded.sample[s4,bfloat16/bfloat16]",
                                  "markov_sharded.sample[s8,bfloat16/bfloat16,stamps]"])
def test_one_variant_compiles_without_spills(name):
    from harness import compile_gate
    from kernels.markov_sharded import host as sharded

    (entry,) = [v for v in sharded.compile_variants("sm_90a") if v[0] == name]
    text, error = compile_gate._capture_fd2(lambda: entry[1]("--gpu-arch sm_90a remarks{ptx}"))
    assert error is None, error
    # The DSL wraps the ptxas log of a kernel with local memory (the printf
    # buffer) at 90 columns: read the figures from the unwrapped text.
    flat = re.sub(r"\s+", " ", text)
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", flat)]
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", flat)
    assert len(registers) == len(spills) == 1, flat[-2000:]
    assert registers[0] <= 128
    assert spills[0] == ("0", "0"), flat[-2000:]


def test_kernel_ptx_carries_the_protocol_instructions():
    """The compiled kernel emits the seed's accesses with their orderings:
    relaxed system-scope records, the rank-local maximum and its reset, the
    acq_rel arrival count, the system fences, L2-only staging reads, the MMA
    chain (16 resident MMAs unrolled, 2 per trip of the streamed loop)."""
    import cutlass.cute as cute
    from cutlass import Int32, Int64

    from kernels.markov_sharded.kernel import ShardedMarkovSample

    args = [Int64(0)] * 20 + [Int32(1)] * 7 + [Int64(0), Int64(0), Int32(0), cute.runtime.make_fake_stream()]
    compiled = cute.compile(ShardedMarkovSample(2, "float32", "bfloat16"), *args, options="--keep-ptx --gpu-arch sm_90a")
    text = compiled.artifacts.PTX
    text = text if isinstance(text, str) else text.decode()
    for instruction in (
        "st.relaxed.sys.global.b64", "ld.relaxed.sys.global.b64", "atom.global.max.u64", "atom.global.exch.b64",
        "atom.add.acq_rel.gpu.global.u32", "membar.sys", "membar.gl", "ld.global.cg.v4.b32", "div.full.f32",
        "add.rn.f32", "cvt.rn.bf16x2.f32", "ld.volatile.global.b32", "st.global.v4.b32", "%globaltimer", "trap",
    ):
        assert instruction in text, instruction
    assert text.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 16 + 2
    assert ".reqntid 512" in text or ".maxntid 512" in text


def _sample_ptx(steps: int, stamps: bool, **config) -> str:
    """The PTX of the coop BF16/BF16 ``ShardedMarkovSample`` variant of ``steps``, with or without stamps."""
    import cutlass.cute as cute
    from cutlass import Int32, Int64

    from kernels.markov_sharded.kernel import ShardedMarkovSample

    args = [Int64(0)] * 20 + [Int32(1)] * 7 + [Int64(0), Int64(0), Int32(0), cute.runtime.make_fake_stream()]
    kernel = ShardedMarkovSample(steps, "bfloat16", "bfloat16", stamps=stamps, **config)
    text = cute.compile(kernel, *args, options="--keep-ptx --gpu-arch sm_90a").artifacts.PTX
    return text if isinstance(text, str) else text.decode()


def test_stamps_are_a_separate_variant_of_nine_timer_stores():
    """Off by default (same key, hence symbol, as before the option); on, the
    same kernel plus one timer read and one predicated 64-bit store per stamp
    site (entry, setup, resident, streamed, fold, wait, next, copy, end)."""
    from kernels.markov_sharded.kernel import ShardedMarkovSample

    assert ShardedMarkovSample(8, "bfloat16", "bfloat16").key() == (
        "ShardedMarkovSample", "s8", "bfloat16", "bfloat16", "coop", "keep50")
    assert ShardedMarkovSample(8, "bfloat16", "bfloat16", stamps=True).key()[-1] == "stamps"
    with pytest.raises(TypeError, match="stamps"):
        ShardedMarkovSample(8, "bfloat16", "bfloat16", stamps=1)
    plain, stamped = _sample_ptx(2, False), _sample_ptx(2, True)
    assert plain != stamped
    assert stamped.count("%globaltimer") == plain.count("%globaltimer") + 9
    assert stamped.count("st.global.b64") == plain.count("st.global.b64") + 9
    # Everything else is the same kernel: the MMA chain and the protocol's accesses.
    for instruction in ("mma.sync.aligned.m16n8k16", "st.relaxed.sys.global.b64", "atom.add.acq_rel.gpu", "membar"):
        assert stamped.count(instruction) == plain.count(instruction), instruction


def test_stamp_buffer_follows_the_control_words():
    names = layout.stamp_names(2)
    assert names[:2] == ("start", "setup") and names[-2:] == ("copy", "end")
    assert names[2:7] == tuple(f"s0.{n}" for n in layout.STEP_STAMPS)
    assert len(layout.stamp_names(8)) == 5 * 8 + 4
    assert layout.STAMP_WORD >= layout.CONTROL_WORDS and layout.STAMP_WORD % 2 == 0
    assert layout.control_words() == layout.CONTROL_WORDS
    assert layout.control_words(stamps=True, ctas=132, steps=8) == layout.STAMP_WORD + 2 * 132 * 44


def test_probe_compiles():
    from kernels.markov_sharded import probe as sharded_probe

    assert sharded_probe._compiled() is not None


def test_kernel_arguments_pin_the_seed_layout():
    """The addresses and sizes the host passes: the rank's head rows, its noise
    columns, the base column of a full-width base, the peer table and control words."""
    from kernels.markov_sharded.host import kernel_arguments

    world, rank = 4, 2
    cfg = check_config(config(world=world), world)
    inputs, params = call()
    args = check_call(cfg, rank, CPU, inputs, params, capturing=False)
    embed, head = torch.zeros(2048, 256, dtype=torch.bfloat16), torch.zeros(2048, 256, dtype=torch.bfloat16)
    first = rank * cfg.vocab_local
    peer_ptrs = torch.tensor([0x10000 * (k + 1) for k in range(world)], dtype=torch.int64)
    control = torch.zeros(layout.CONTROL_WORDS, dtype=torch.int32)
    tokens = torch.zeros(args.rows, cfg.steps, dtype=torch.int64)
    pointers, sizes = kernel_arguments(cfg, rank, 3, args, tokens, embed, head[first : first + cfg.vocab_local],
                                       peer_ptrs, control, 0xABC0, 7)
    assert len(pointers) == 20 and len(sizes) == 7
    base = inputs["base_logits"]
    assert pointers[:4] == (base.data_ptr(), 2 * 2048, 2048, first)
    assert pointers[4] == embed.data_ptr() and pointers[5] == head.data_ptr() + first * layout.ROW_BYTES
    assert pointers[9] == inputs["noise"].data_ptr() + first * 4 and pointers[10] == 2048
    cache = inputs["logits_cache"]
    assert pointers[11:15] == (cache.data_ptr(), 2 * 2048, 2048, tokens.data_ptr())
    assert pointers[15:] == (peer_ptrs.data_ptr(), control.data_ptr(), 0xABC0, 7, cfg.max_reqs)
    assert sizes == (1, rank, world, 512, 3, 8, 3)


def test_virtual_peer_table_addresses_each_ranks_own_mailbox():
    """Rank j's peer table lists every rank's buffer base in rank order, so the
    record rank k stores at ``peers[j] + record_offset(p, s, r, k)`` is the one
    rank j polls at its own base plus the same offset (CPU stand-in for the device)."""
    from kernels.fabric import VirtualFabric

    world = 4
    nbytes = layout.peer_buffer_bytes(max_rows=8, steps=2, vocab=64, cache_bytes=2)

    def body(fabric):
        buffer = fabric.alloc("markov_sharded.peer", nbytes)
        fabric.barrier()
        tag = layout.launch_tag(0)
        for target in range(world):
            offset = layout.record_offset(0, 1, 3, fabric.rank)
            view = buffer.peer_tensor(target)[offset : offset + 8].view(torch.int64)
            record = layout.encode_record(layout.candidate_key(0x3F800000, fabric.rank), tag)
            view[0] = record - (1 << 64) if record >= 1 << 63 else record
        fabric.barrier()
        return buffer.peer_ptrs.tolist(), buffer.local.data_ptr(), [
            layout.decode_record(int(buffer.local[layout.record_offset(0, 1, 3, k):][:8].view(torch.int64)[0]))
            for k in range(world)
        ]

    results = VirtualFabric.run(VirtualFabric.create(world, "cpu", timeout_s=30), body)
    tables = [table for table, _, _ in results]
    bases = [base for _, base, _ in results]
    assert all(table == bases for table in tables)
    for _, _, records in results:
        assert [layout.key_index(key) for key, _ in records] == list(range(world))
        assert {tag for _, tag in records} == {layout.launch_tag(0)}
    assert layout.record_offset(0, 1, 3, 0) == ((0 * 8 + 1) * 8 + 3) * 8 * 8 < layout.STAGING_OFFSET


def test_kernel_variants_have_distinct_symbol_names():
    """CuTe DSL 4.8.1 mangles ``str(kernel)`` into the symbol: variants must differ."""
    from kernels.markov_sharded.kernel import ShardedMarkovSample

    names = {
        str(ShardedMarkovSample(s, b, c, cooperative))
        for s in range(1, 9) for b in layout.DTYPE_BYTES for c in layout.DTYPE_BYTES for cooperative in (True, False)
    }
    assert len(names) == 8 * 2 * 2 * 2
    assert all("object at" not in name and re.fullmatch(r"[A-Za-z0-9_]+", name) for name in names)


def _launch_attributes(compiled) -> dict[int, int]:
    """``{CUlaunchAttributeID: value}`` the compiled host launcher stores into its
    ``CUlaunchAttribute`` array (read from the lowered LLVM dialect of ``__call__``)."""
    text = str(compiled.ir_module)
    start = text.index("llvm.func @cutlass___call___")
    body = text[start : text.find("llvm.func @", start + 1)]
    constants = dict(re.findall(r"(%\d+) = llvm\.mlir\.constant\((-?\d+) : i32\)", body))
    attribute = r"!llvm\.struct<\(i32, array<4 x i8>, array<64 x i8>\)>"
    found = {}
    for element in re.findall(rf"(%\d+) = llvm\.getelementptr (%\d+)\[%\d+\] : \(!llvm\.ptr, i32\) -> !llvm\.ptr, {attribute}", body):
        fields = {}
        for field, index in re.findall(rf"(%\d+) = llvm\.getelementptr {element[0]}\[0, (\d)\] : \(!llvm\.ptr\) -> !llvm\.ptr, {attribute}", body):
            stored = re.search(rf"llvm\.store (%\d+), {field} : i32", body)
            if stored and stored.group(1) in constants:
                fields[int(index)] = int(constants[stored.group(1)])
        if 0 in fields and 2 in fields:
            found[fields[0]] = fields[2]
    return found


def test_ranks_sharing_a_gpu_launch_plainly():
    """Virtual ranks (and ``ranks_per_device > 1``) launch without the cooperative
    attribute, a rank alone on its GPU with it: the host launcher's
    ``CU_LAUNCH_ATTRIBUTE_COOPERATIVE`` (id 2) is 1 only in the cooperative variant."""
    from kernels.markov_sharded import host as sharded

    class Fabric:
        def __init__(self, provider):
            self.provider = provider

    assert sharded.cooperative_launch(Fabric("symmetric"), check_config(config(world=2), 2))
    assert not sharded.cooperative_launch(Fabric("virtual"), check_config(config(world=2), 2))
    assert sharded.cooperative_launch(Fabric("virtual"), check_config(config(world=1), 1))
    assert not sharded.cooperative_launch(Fabric("symmetric"), check_config(config(world=2, ranks_per_device=2), 2))
    cooperative_attribute = 2
    for cooperative in (True, False):
        compiled = sharded.compiled_kernel(1, "bfloat16", "bfloat16", cooperative=cooperative)
        assert _launch_attributes(compiled).get(cooperative_attribute) == int(cooperative)


def test_sampler_reads_its_stamps_after_the_control_words():
    from types import SimpleNamespace

    from kernels.markov_sharded.host import ShardedMarkovSampler

    sampler = object.__new__(ShardedMarkovSampler)
    sampler.stamped, sampler.ctas, sampler.cfg = True, 3, SimpleNamespace(steps=2)
    count = len(layout.stamp_names(2))
    control = torch.zeros(layout.control_words(stamps=True, ctas=3, steps=2), dtype=torch.int32)
    values = torch.arange(3 * count, dtype=torch.int64) * (1 << 33) + 5  # both halves of every word in use
    control[layout.STAMP_WORD :] = values.view(torch.int32)
    sampler.control = control
    names, stamps = sampler.stamps()
    assert names == layout.stamp_names(2)
    assert stamps.shape == (3, count) and torch.equal(stamps.flatten(), values)
    sampler.stamped = False
    with pytest.raises(RuntimeError, match="stamps=True"):
        sampler.stamps()


def test_the_config_has_every_field_the_host_code_reads():
    """Each ``cfg.<name>`` the sampler's host and bench code read exists on the contract's config (the
    contracts merge dropped ``cache_bytes``, which only a GPU run reached)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sources = [*root.glob("kernels/markov_sharded/*.py"), root / "harness/bench/breakdown.py",
               *root.glob("harness/families/markov_sharded/*.py")]
    read = {name for path in sources for name in re.findall(r"\bcfg\.([a-z_]+)\b", path.read_text())}
    cfg = check_config(config(), 2)
    assert read and not [name for name in sorted(read) if not hasattr(cfg, name)]
    assert cfg.cache_bytes == torch.empty(0, dtype=getattr(torch, config()["cache_dtype"])).element_size()


def test_streamed_tiles_go_through_cp_async_with_the_l2_policy_only_when_asked():
    """The streamed head tiles are copied into shared memory with 16 cp.async per lane and tile (the
    prologue's, the loop's), waited for with wait_group 0; the default marks half of them evict_last,
    ``l2_keep=0`` issues no policy; a fraction outside [0, 1] is refused."""
    from kernels.markov_sharded.kernel import ShardedMarkovSample

    kept, plain = _sample_ptx(2, False), _sample_ptx(2, False, l2_keep=0.0)
    assert "createpolicy.fractional.L2::evict_last.L2::evict_first.b64" in kept and " 0.5;" in kept
    assert kept.count("cp.async.cg.shared.global.L2::cache_hint") == 2 * 16
    assert "createpolicy" not in plain and "cache_hint" not in plain
    assert plain.count("cp.async.cg.shared.global") == 2 * 16
    for text in (kept, plain):
        assert "cp.async.wait_group 0;" in text and "cp.async.commit_group;" in text
    assert ShardedMarkovSample(8, "bfloat16", "bfloat16", l2_keep=0.0).key()[-1] == "coop"
    for bad in (-0.1, 1.5, True, "half"):
        with pytest.raises(ValueError, match="l2_keep"):
            ShardedMarkovSample(8, "bfloat16", "bfloat16", l2_keep=bad)
