"""CPU tests of the fused loop's device exchange: tags and parity, the buffer layout and work split, a model of
the protocol under every interleaving stream order allows, and the host-side argument checks (no GPU)."""

from __future__ import annotations

import itertools
import os
import random

import pytest
import torch

from kernels.markov_fused import exchange_layout as layout
from kernels.markov_fused.exchange_layout import ExchangeModel, parity_of, tag_of


@pytest.mark.parametrize("launch", [0, 1, 2, 3, (1 << 31) - 2, (1 << 31) - 1, 1 << 31, (1 << 32) - 2, (1 << 32) - 1])
def test_tag_is_never_zero_and_differs_from_two_launches_back(launch):
    assert 1 <= tag_of(launch) <= 1 << 31
    assert tag_of(launch) != tag_of((launch - 2) & 0xFFFFFFFF)
    assert parity_of(launch) != parity_of((launch + 1) & 0xFFFFFFFF)


def test_counter_wrap_keeps_consecutive_tags_distinct():
    tags = [tag_of(n & 0xFFFFFFFF) for n in range((1 << 32) - 3, (1 << 32) + 3)]
    assert all(tags[i] != tags[i + 2] for i in range(len(tags) - 2))


def test_flags_and_slots_do_not_overlap():
    world, slot = 4, 48
    flags = {layout.flag_offset(p, k, c) for p in range(2) for k in range(layout.MAX_RANKS)
             for c in range(layout.MAX_CTAS)}
    assert len(flags) == 2 * layout.MAX_RANKS * layout.MAX_CTAS and max(flags) + layout.FLAG_BYTES == layout.FLAGS_BYTES
    slots = sorted(layout.slot_offset(p, k, world, slot) for p in range(2) for k in range(world))
    assert slots[0] == layout.FLAGS_BYTES and all(b - a == slot for a, b in zip(slots, slots[1:]))
    assert layout.buffer_bytes(world, slot) == slots[-1] + slot


@pytest.mark.parametrize("pieces", [1, 7, 128, 513, 4096, 100_000])
def test_cta_shares_cover_every_piece_once(pieces):
    ctas = layout.gather_ctas(pieces)
    assert 1 <= ctas <= layout.MAX_CTAS
    covered = []
    for cta in range(ctas):
        begin, end = layout.cta_share(pieces, ctas, cta)
        covered += range(begin, end)
    assert covered == list(range(pieces))


def test_transfer_unit_depends_on_the_size_alone():
    assert layout.transfer_unit(64) == 16 and layout.transfer_unit(6) == 2 and layout.transfer_unit(24) == 2


def _run_schedule(world: int, launches: int, rng: random.Random) -> list:
    """Every rank's gathers of ``launches`` launches under a random order of the phases stream order allows."""
    model = ExchangeModel(world)
    done = [0] * world
    results = [[] for _ in range(world)]
    while min(done) < launches:
        moves = []
        for rank in range(world):
            if done[rank] == launches:
                continue
            if model.posted[rank] is None:
                moves.append(("post", rank))
            elif model.ready(rank):
                moves.append(("finish", rank))
        assert moves, "deadlock: no rank can move"
        kind, rank = rng.choice(moves)
        if kind == "post":
            model.post(rank, (rank, done[rank]))
        else:
            results[rank].append(model.finish(rank))
            done[rank] += 1
    return results


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_model_every_interleaving_gathers_the_launchs_payloads(world):
    rng = random.Random(world)
    for _ in range(200):
        results = _run_schedule(world, 6, rng)
        for rank in range(world):
            assert results[rank] == [[(k, n) for k in range(world)] for n in range(6)]


def test_model_a_stale_slot_is_not_taken():
    model = ExchangeModel(2)
    # Rank 1's slot in rank 0's buffer holds launch -2's payload and tag (what an older launch left there).
    model.slots[0, 0, 1] = "stale"
    model.flags[0, 0, 1] = tag_of((0 - 2) & 0xFFFFFFFF)
    model.post(0, "fresh 0")
    assert not model.ready(0)
    with pytest.raises(RuntimeError, match="does not carry tag"):
        model.finish(0)
    model.post(1, "fresh 1")
    assert model.finish(0) == ["fresh 0", "fresh 1"]


def test_model_a_peer_calling_with_another_size_is_named_not_gathered():
    model = ExchangeModel(2)
    model.post(0, "rows 4", nbytes=64)
    model.post(1, "rows 2", nbytes=32)
    assert model.ready(0) and model.ready(1)  # the tags agree: only the size word tells the calls apart
    with pytest.raises(layout.CallMismatch, match="rank 0 launch 0: rank 1 called with 32 bytes, this rank with 64"):
        model.finish(0)
    with pytest.raises(layout.CallMismatch, match="rank 1 launch 0: rank 0 called with 64 bytes, this rank with 32"):
        model.finish(1)


def test_model_a_rank_that_skips_a_call_leaves_its_peer_waiting_on_the_older_tag():
    model = ExchangeModel(2)
    for rank in (0, 1):
        model.post(rank, rank)
    model.finish(0), model.finish(1)
    model.post(0, "call 1")  # rank 1 skips its call 1: rank 0 sees rank 1's flag of launch -1 (never posted)
    assert not model.ready(0)
    assert model.flags.get((0, parity_of(1), 1), 0) & 0xFFFFFFFF != tag_of(1)


def test_the_flag_word_holds_the_tag_low_and_the_size_high():
    assert layout.flag_word(tag_of(5), 48) == tag_of(5) | 48 << 32
    assert layout.flag_word(0xFFFFFFFF, 0xFFFFFFFF) == (1 << 64) - 1


def test_model_refuses_a_post_ahead_of_stream_order():
    model = ExchangeModel(2)
    model.post(0, "a")
    with pytest.raises(RuntimeError, match="before finishing its previous"):
        model.post(0, "b")


def test_model_a_rank_two_launches_ahead_is_impossible():
    # Rank 0 can finish launch 0 only after rank 1 posted it, and rank 1 posts launch 1 only after finishing 0:
    # rank 0 never posts launch 2 (same parity as 0) while rank 1 still has launch 0 to read.
    model = ExchangeModel(2)
    for step in itertools.count():
        model.post(0, step)
        if not model.ready(0):
            break
        model.finish(0)
    assert model.launches == [0, 0]


# ----------------------------------------------------------------------------- host-side checks


def test_timeout_must_be_a_non_negative_int():
    from kernels.markov_fused.exchange import check_timeout

    assert check_timeout(0) == 0
    for bad in (-1, 1.5, True, None):
        with pytest.raises(ValueError, match="^timeout_ns: expected an int >= 0"):
            check_timeout(bad)


def test_peer_gather_needs_a_fabric():
    from kernels.markov_fused.exchange import PeerGather

    with pytest.raises(TypeError, match=r"^fabric: expected a kernels.fabric provider \(missing 'rank'\)"):
        PeerGather(object(), "x", 64)


def _gather_on_cpu(slot_bytes: int = 64):
    """A ``PeerGather`` with CPU fields and nothing compiled: its argument checks run, no launch is reached."""
    from kernels.markov_fused.exchange import PeerGather

    gather = PeerGather.__new__(PeerGather)
    gather.rank, gather.world, gather.device, gather.slot_bytes = 0, 2, torch.device("cpu"), slot_bytes
    return gather


@pytest.mark.parametrize(
    "tensor, message",
    [
        (torch.zeros(4, 4, dtype=torch.int32).t(), r"^tensor: expected a non-empty contiguous tensor"),
        (torch.zeros(5, 4, dtype=torch.int32), r"^tensor: 80 bytes; this gather holds an even number up to 64"),
        (torch.zeros(3, dtype=torch.uint8), r"^tensor: 3 bytes"),
        (torch.zeros(17, dtype=torch.bfloat16)[1:], r"^tensor: expected 16-byte alignment"),
    ],
)
def test_gather_checks_its_tensor(tensor, message):
    with pytest.raises(ValueError, match=message):
        _gather_on_cpu().gather(tensor)


def test_exchange_arguments_of_markov_kernels():
    from kernels.fabric import VirtualFabric
    from kernels.markov_fused.checks import check_exchange

    fabrics = VirtualFabric.create(2, "cpu")
    with pytest.raises(ValueError, match="^group: the exchange needs a vocab shard"):
        check_exchange(fabrics[0], "cpu", None, 8, 8)
    with pytest.raises(ValueError, match="^max_rows: expected an int >= 1 with group"):
        check_exchange(fabrics[0], "cpu", 2, None, 8)
    with pytest.raises(ValueError, match="^max_steps: expected an int >= 1 with group"):
        check_exchange(fabrics[0], "cpu", 2, 8, 0)
    with pytest.raises(ValueError, match="^group: world 2 differs from tp 4"):
        check_exchange(fabrics[0], "cpu", 4, 8, 8)
    assert check_exchange(fabrics[1], "cpu", 2, 8, 8) is fabrics[1]


# ----------------------------------------------------------------------------- the step's base convention


def _sharded_kernels_on_cpu(tp: int):
    """A sharded ``MarkovKernels`` (vocab 1024, R 64) with CPU tensors and nothing compiled."""
    from kernels.markov_fused.host import MarkovKernels

    kernels = MarkovKernels.__new__(MarkovKernels)
    kernels._bind(torch.zeros(1024, 64, dtype=torch.bfloat16), torch.zeros(4, 64, dtype=torch.bfloat16),
                  1024 // tp, False, tp, False)
    return kernels


def _step_arguments(width: int, rows: int = 3, steps: int = 2) -> dict:
    """A sharded step's operands on the CPU (block 512), ``base`` the whole-vocab step view."""
    blocks = -(-width // 512)
    return dict(
        base=torch.zeros(rows, steps, 1024, dtype=torch.bfloat16)[:, 1], bias=torch.zeros(rows, width, dtype=torch.bfloat16),
        cache=torch.zeros(rows, steps, width, dtype=torch.bfloat16), col=1,
        idx_map=torch.zeros(rows, steps, dtype=torch.int64)[:, 1], pos=torch.zeros(rows, steps, dtype=torch.int64)[:, 1],
        seeds=torch.zeros(4, dtype=torch.int64), temperature=torch.zeros(4),
        block_argmax=torch.zeros(rows * blocks, dtype=torch.int64), block_max=torch.zeros(rows * blocks),
        arrivals=torch.zeros(rows, dtype=torch.int32), tokens=torch.zeros(rows, steps, dtype=torch.int64),
        emb=torch.zeros(rows, 64, dtype=torch.bfloat16), packets=torch.zeros(rows, 4, dtype=torch.int32),
        mult=1.0, inv_cap=1 / 30, cap=30.0,
    )


@pytest.mark.parametrize("tp, rank", [(4, 1), (8, 1), (8, 3)])
def test_the_seeds_shard_view_of_base_is_read_from_its_first_column(tp, rank):
    """``base[:, col, off:off + width]`` and ``base[:, col, off:]`` start at id ``vocab_offset`` (the seed's
    meaning, read from column 0); the whole-vocab ``base[:, col]`` is read from column ``vocab_offset``."""
    from kernels.markov_fused.checks import check_step

    kernels = _sharded_kernels_on_cpu(tp)
    width = 1024 // tp
    offset = rank * width
    args = _step_arguments(width)
    full = torch.zeros(3, 2, 1024, dtype=torch.bfloat16)
    for base, start in ((full[:, 1], offset), (full[:, 1, offset:offset + width], 0), (full[:, 1, offset:], 0)):
        args["base"] = base
        assert check_step(kernels, **{k: v for k, v in args.items() if k not in ("mult", "inv_cap", "cap")},
                          vocab_offset=offset, block=512) == start


def test_a_base_narrower_than_the_width_says_how_to_pass_the_row():
    kernels = _sharded_kernels_on_cpu(4)
    args = _step_arguments(256)
    args["base"] = torch.zeros(3, 2, 1024, dtype=torch.bfloat16)[:, 1, 256:500]
    with pytest.raises(ValueError, match=r"^base: expected this step's logits over the whole vocabulary, "
                                         r"\[rows, 1024\] \(e.g. base\[:, col\]; read from column vocab_offset\), "
                                         r"or the seed's view .* got 244 columns"):
        kernels.step(**args, vocab_offset=256, block=512, pdl=False)


def test_the_whole_vocab_view_of_base_passes_the_base_check():
    kernels = _sharded_kernels_on_cpu(4)
    args = _step_arguments(256)
    # Past the base checks the next operand named is the device's (CPU tensors, no launch).
    args["packets"] = torch.zeros(3, 5, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^packets: expected shape \(3, 4\)"):
        kernels.step(**args, vocab_offset=256, block=512, pdl=False)


def test_vocab_offset_outside_the_vocab_is_refused():
    kernels = _sharded_kernels_on_cpu(4)
    with pytest.raises(ValueError, match=r"^vocab_offset: expected columns \[1024, 1280\) inside \[0, 1024\)"):
        kernels.step(**_step_arguments(256), vocab_offset=1024, block=512, pdl=False)


def test_seed_functions_check_before_compiling():
    from kernels.markov_fused import host as fused

    w1 = torch.zeros(64, 8, dtype=torch.bfloat16)
    emb = torch.zeros(2, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="^w1: expected a CUDA tensor"):
        fused.anchor_embed(torch.zeros(4, dtype=torch.int32), torch.zeros(2, dtype=torch.int64), w1, emb,
                           torch.zeros(2, dtype=torch.int32))
    with pytest.raises(ValueError, match="^w1: expected a CUDA tensor"):
        fused.markov_pick(torch.zeros(2, 2, 4, dtype=torch.int32), 2, torch.zeros(2, 1, dtype=torch.int64), 0, w1,
                          emb, tp=2, pdl=False)
    with pytest.raises(ValueError, match="^gathered: expected a BF16 \\[tp, rows, steps, shard\\] tensor"):
        fused.cache_fill(torch.zeros(2, 4, dtype=torch.bfloat16), 4, torch.zeros(1, 1, 8, dtype=torch.bfloat16),
                         torch.zeros(1, 1, dtype=torch.int64), 1, 1, 4, 8)
    with pytest.raises(ValueError, match=r"^gathered: expected rank stride src_s0=5"):
        fused.cache_fill(torch.zeros(2, 1, 1, 4, dtype=torch.bfloat16), 5, torch.zeros(1, 1, 8, dtype=torch.bfloat16),
                         torch.zeros(1, 1, dtype=torch.int64), 1, 1, 4, 8)


# ----------------------------------------------------------------------------- the harness driver


def test_driver_refuses_ranks_calling_with_different_sizes():
    from harness.families.markov_fused import kernel as driver
    from kernels.fabric import FabricMismatch

    class Fabric:
        rank, world = 0, 2

        def all_gather(self, tensor):
            return torch.stack([tensor, torch.tensor([3, 2])])

    loop = driver.FusedMarkovLoop.__new__(driver.FusedMarkovLoop)
    loop.comm, loop.rank, loop.tp, loop.max_rows, loop.max_steps = Fabric(), 0, 2, 8, 8
    with pytest.raises(FabricMismatch, match="^rank 1 calls the draft loop with 3 rows x 2 steps where rank 0 has 2 x 2"):
        loop._check_same_call(2, 2)
    with pytest.raises(ValueError, match="^call_inputs.base: 9 rows x 2 steps exceed config.max_rows 8"):
        loop._check_same_call(9, 2)


@pytest.mark.parametrize("key, value", [("max_rows", 0), ("max_steps", True), ("timeout_ns", -1)])
def test_driver_exchange_config_errors_name_the_key(key, value):
    from harness.families.markov_fused import kernel as driver

    with pytest.raises(ValueError, match=f"^config.{key}: expected an int"):
        driver._exchange_limits({key: value})


# ----------------------------------------------------------------------------- the flight recorder


def _gather_ptx(flight: bool) -> str:
    """The PTX entry of the 16-byte gather, with or without the flight recorder, compiled for sm_90a."""
    pytest.importorskip("cutlass")
    os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
    from kernels.compile import compiled
    from kernels.markov_fused.exchange_kernel import PeerGatherKernel

    text = compiled(PeerGatherKernel(unit=16, flight=flight), "--gpu-arch sm_90a --keep-ptx", remedy="test")
    text = text.artifacts.PTX
    text = text if isinstance(text, str) else text.decode()
    return text[text.index(".entry"):]


def test_the_gather_records_its_launch_in_the_loops_ring_and_the_variant_without_does_not():
    from kernels import flight
    from kernels.markov_fused.exchange_kernel import GATHER_KERNEL, PeerGatherKernel

    recorded, bare = _gather_ptx(True), _gather_ptx(False)
    # the ring's counter taken once, six 8-byte stores of the begin and two of the end, at system scope, relaxed;
    # the end (the last CTA, not the one that began) reads the launch number back
    # (the other relaxed atoms of both variants are the claims of the diagnostic record, CLAIM_WORD: one on a
    # timeout, one on a call mismatch)
    assert recorded.count("atom.add.relaxed.gpu.global.u32") == 3
    assert bare.count("atom.add.relaxed.gpu.global.u32") == 2
    assert recorded.count("st.relaxed.sys.global.b64") == 8
    assert recorded.count("ld.relaxed.gpu.global.b32") == 1
    assert "st.relaxed.sys.global.b64" not in bare
    assert bare.count("%globaltimer") == recorded.count("%globaltimer") - 2
    assert PeerGatherKernel(unit=16, flight=False).key() == ("markov_peer_gather", 16, "noflight")
    assert GATHER_KERNEL == flight.kernel_index("markov_fused", "gather") == len(flight.KERNELS["markov_fused"]) - 1


def test_a_timed_out_gather_claims_the_record_before_it_writes_it():
    # One writer per rank (issue 41): the claim's atom comes before the record's first system-scope fence, and
    # the record's writes hang off the claim's result, so concurrent timeouts of one rank leave one whole record.
    bare = _gather_ptx(False)
    claim = bare.index("atom.add.relaxed.gpu.global.u32")
    assert "membar.sys" in bare and claim < bare.index("membar.sys")
    assert claim < bare.index("trap;")


def test_the_flag_posts_tag_and_size_in_one_release_and_is_polled_whole():
    # The reader that sees the tag must see the size the writer called with: one 64-bit word, never two stores.
    bare = _gather_ptx(False)
    assert bare.count("st.release.sys.global.b64") == 1 and "st.release.sys.global.b32" not in bare
    assert "ld.acquire.sys.global.b64" in bare and "ld.acquire.sys.global.b32" not in bare
