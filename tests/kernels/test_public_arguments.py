"""The case list of ``public_arguments.py`` on the CPU: complete, and its bad values what they say.

Every tensor parameter of every public entry point (the public methods of
``MarkovKernels``, ``ShardedMarkovSampler`` and ``AllReduceMHC``, their
constructors included, and the seed's functions beside ``MarkovKernels``,
found by ``inspect.signature`` as ``test_public_api.py`` does) must have its
cases, so an argument added without them fails here; every case must name a
real parameter and be run by one subject. The GPU run is
``test_public_arguments_gpu.py``."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

import public_arguments  # noqa: E402

# Parameters holding ids or indices: each needs an out-of-range try or a note on how the device bounds it.
ID_PARAMETERS = {"input_ids", "anchor_idx", "idx_map", "idx_mapping", "expanded_idx_to_permuted_idx"}


def public_entry_points() -> dict[str, inspect.Signature]:
    """Every public entry point with a tensor parameter, by the name the cases use (``MarkovKernels.step``,
    ``fused.markov_step``), and its signature."""
    from kernels.allreduce_mhc import AllReduceMHC
    from kernels.markov_fused import host as fused
    from kernels.markov_sharded.host import ShardedMarkovSampler

    found = {}
    for cls in (fused.MarkovKernels, ShardedMarkovSampler, AllReduceMHC):
        for name, member in vars(cls).items():
            if inspect.isfunction(member) and (not name.startswith("_") or name in ("__init__", "__call__")):
                found[f"{cls.__name__}.{name}"] = inspect.signature(member)
    for name in fused.__all__:
        member = getattr(fused, name)
        if inspect.isfunction(member) and member.__module__ == fused.__name__:
            found[f"fused.{name}"] = inspect.signature(member)
    return {entry: signature for entry, signature in found.items() if tensor_parameters(signature)}


def tensor_parameters(signature: inspect.Signature) -> list[str]:
    """The parameters annotated with a tensor (alone, optional, or in a tuple)."""
    return [name for name, parameter in signature.parameters.items() if "Tensor" in str(parameter.annotation)]


def test_the_public_entry_points_are_the_seeds():
    assert set(public_entry_points()) == {
        "MarkovKernels.__init__", "MarkovKernels.anchor_embed", "MarkovKernels.step", "MarkovKernels.gather_packets",
        "MarkovKernels.pick", "MarkovKernels.gather_draft", "MarkovKernels.cache_fill", "fused.anchor_embed",
        "fused.markov_step", "fused.markov_pick", "fused.cache_fill", "ShardedMarkovSampler.__init__",
        "ShardedMarkovSampler.__call__", "AllReduceMHC.__call__", "AllReduceMHC.finalize"}


def test_every_tensor_parameter_of_every_public_entry_point_has_cases():
    covered = {(case.entry, public_arguments.parameter_of(case.argument)) for case in public_arguments.CASES}
    missing = [(entry, name) for entry, signature in public_entry_points().items()
               for name in tensor_parameters(signature) if (entry, name) not in covered]
    assert missing == [], f"tensor arguments without a case in public_arguments.ENTRY_ARGUMENTS: {missing}"


def test_every_case_names_a_tensor_parameter_of_its_entry_point():
    entries = public_entry_points()
    stale = [(case.entry, case.argument) for case in public_arguments.CASES
             if case.entry not in entries
             or public_arguments.parameter_of(case.argument) not in tensor_parameters(entries[case.entry])]
    assert stale == []


def test_every_tensor_argument_is_tried_too_small_too_large_and_of_a_wrong_dtype():
    kinds: dict[tuple[str, str], set[str]] = {}
    for case in public_arguments.CASES:
        kinds.setdefault((case.entry, case.argument), set()).add(case.kind)
    lacking = {key: found for key, found in kinds.items() if not {"too small", "too large", "wrong dtype"} <= found}
    assert lacking == {}


def test_every_id_argument_is_tried_out_of_range_or_noted_as_bounded_on_the_device():
    bounded = {(case.entry, case.argument) for case in public_arguments.CASES
               if case.kind == "out of range" or (case.make is None and case.note)}
    ids = {(case.entry, case.argument) for case in public_arguments.CASES if case.argument in ID_PARAMETERS}
    assert ids - bounded == set()


def test_every_entry_point_is_run_by_exactly_one_subject():
    runs = [entry for subject in public_arguments.SUBJECTS for entry in subject.entries]
    assert sorted(runs) == sorted(set(runs)) == sorted(public_arguments.ENTRY_ARGUMENTS)


@pytest.mark.parametrize("valid", [torch.arange(24, dtype=torch.int64).view(2, 3, 4),
                                   torch.arange(5, dtype=torch.int32),
                                   torch.randn(4, 6).to(torch.bfloat16)[:, 1:5]],
                         ids=["int64-3d", "int32-vector", "bf16-view"])
def test_bad_values_keep_the_valid_values_and_change_only_what_they_say(valid):
    call = public_arguments.Call({}, None)
    too_small, _ = public_arguments.resized(public_arguments.shrink(0))(valid, call)
    assert too_small.shape[0] == valid.shape[0] - 1
    assert torch.equal(too_small.reshape(-1), valid.reshape(-1)[:too_small.numel()])
    wrong_dtype, described = public_arguments.retyped(valid, call)
    assert wrong_dtype.dtype == public_arguments.WRONG_DTYPE[valid.dtype] and wrong_dtype.shape == valid.shape
    assert described.startswith("dtype ")
    wrong_stride, _ = public_arguments.restrided(valid, call)
    assert torch.equal(wrong_stride, valid) and wrong_stride.stride(-1) != 1
    for bad in (too_small, wrong_dtype, wrong_stride):
        # Inside a larger allocation, aligned as the kernels ask: a write past its ends shows in a snapshot.
        assert bad.untyped_storage().nbytes() >= bad.numel() * bad.element_size() + 2 * public_arguments.GUARD_BYTES
        assert bad.data_ptr() % 16 == 0


def test_an_id_planted_out_of_range_is_the_first_element_and_only_it():
    valid = torch.arange(6, dtype=torch.int64).view(3, 2)
    bad, described = public_arguments.planted(lambda call: 16)(valid, public_arguments.Call({}, None))
    assert bad.reshape(-1).tolist() == [16, 1, 2, 3, 4, 5] and described == "16 at element 0 (valid call: 0)"


def test_a_snapshot_sees_a_byte_written_past_the_end_of_a_view():
    bad, _ = public_arguments.resized(public_arguments.grow(1))(torch.zeros(2, 3), public_arguments.Call({}, None))
    snapshot = public_arguments.Snapshot([bad])
    assert snapshot.changes() == ""
    public_arguments.storage_bytes(bad)[-1] ^= 1  # the last guard byte, outside the view
    assert snapshot.changes() == "1 allocation(s) of 1 changed"


def test_the_argument_is_named_as_a_whole_word():
    names = public_arguments.names_argument
    assert names("emb: expected contiguous rows", "emb") and not names("embeds: expected shape (3, 64)", "emb")
    assert names("static['embed_table']: expected shape", "embed_table")
    assert not names("logits_cache: expected shape", "cache") and not names("idx_mapping: expected", "idx_map")
    assert names("mxfp8_out[1] must be torch.uint8 [1024]", "mxfp8_out[1]")
    assert names("block_argmax, block_max, arrivals: expected contiguous", "arrivals")
