"""The decode step of a serving engine as the serving-pattern GPU test runs it: the plan, the inputs, the golden.

A serving engine builds its kernels once per TP rank, then captures its
whole decode step in one CUDA graph and replays it every step after writing
the step's inputs into the captured buffers in place. ``STEP`` is that
step here, over several instances of each family:

- ``allreduce_mhc``: two ``AllReduceMHC`` instances; ``LAYERS`` layers,
  layer ``l`` on instance ``l % 2``, each layer one ``__call__`` (after
  attention) and one ``finalize`` (after the MoE) of ``LAYER_ROWS[l]``
  tokens, so each instance sees its batch size change from call to call,
  across its LL / BT threshold (``bt_min_rows`` 4).
- ``markov_fused``: two draft loops (``MarkovKernels`` with its device
  exchange at tp > 1 and ``HeadGemv`` as the caller's GEMV), one of them
  called twice with different row counts.
- ``markov_sharded``: two ``ShardedMarkovSampler`` instances, one called
  three times with different row counts on its one mailbox.

Each instance is a scenario (``scenarios.schema.validate`` of a dict), so
its inputs come from the scenario builders (``scenarios.builders``: a seed
in, the same bytes on every rank) and its golden outputs from the
harness's unsharded reference (``harness.families.adapter(...).reference``,
with the architecture's facts: the GEMV's MMA model, the GPU's
reciprocals). Call ``j`` of an instance in round ``r`` is the scenario's
call ``r * calls + j``: the same shape every round, other values, so round
0 fills the buffers the graph is captured on and every later round changes
them in place before its replay (``ROUNDS`` rounds).

``public_args`` maps a call's inputs in the harness's form (the
all-reduce's ``[tp, ...]`` contributions) to what rank ``k`` passes the
public API; ``compare`` lists the outputs whose bits differ. Everything
here runs on the CPU; tests/serving/serving_worker.py runs the step on the
GPU under torchrun.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import torch

ROUNDS = 3
LAYERS = 4
LAYER_ROWS = (3, 3, 8, 8)
TP_SIZES = (2, 4)


@dataclass(frozen=True)
class Instance:
    """One public instance of a family in the step: its name, scenario seed, config and calls of one round."""

    name: str
    family: str
    seed: int
    config: Mapping[str, Any]
    calls: tuple  # one round's calls in the scenario form ({rows, steps, params})
    inputs: Mapping[str, Any] | None = None

    @property
    def per_round(self) -> int:
        """Calls of this instance in one step."""
        return len(self.calls)


def _allreduce(name: str, seed: int, layers: tuple[int, ...]) -> Instance:
    """An all-reduce instance serving ``layers``: ``__call__`` then ``finalize`` per layer."""
    calls = tuple({"rows": LAYER_ROWS[layer], "params": {"finalize": finalize}}
                  for layer in layers for finalize in (False, True))
    # BT from 4 rows: the 3-row layers go LL, the 8-row layers BT, on one instance.
    config = {"hidden": 1024, "hc": 4, "capacity": 8, "top_k": 8, "eps": 1e-6, "bt_min_rows": 4}
    return Instance(name, "allreduce_mhc", seed, config, calls)


STEP = (
    _allreduce("allreduce0", 9101, tuple(range(0, LAYERS, 2))),
    _allreduce("allreduce1", 9102, tuple(range(1, LAYERS, 2))),
    Instance("fused0", "markov_fused", 9201, {"vocab": 2048, "dim": 256, "max_reqs": 8, "block": 1024},
             ({"rows": 2, "steps": 4}, {"rows": 6, "steps": 4}), {"temperatures": [0.0, 1.0, 0.5, 2.0]}),
    Instance("fused1", "markov_fused", 9202, {"vocab": 2048, "dim": 256, "max_reqs": 8, "block": 1024},
             ({"rows": 4, "steps": 4},), {"temperatures": [1.0, 0.0]}),
    Instance("sampler0", "markov_sharded", 9301,
             {"vocab": 1024, "steps": 4, "base_dtype": "bfloat16", "cache_dtype": "bfloat16", "max_rows": 8,
              "max_reqs": 16},
             ({"rows": 3}, {"rows": 8}, {"rows": 1}), {"temperatures": [0.0, 1.0, 0.5, 2.0]}),
    Instance("sampler1", "markov_sharded", 9302,
             {"vocab": 1024, "steps": 4, "base_dtype": "bfloat16", "cache_dtype": "bfloat16", "max_rows": 8,
              "max_reqs": 16},
             ({"rows": 5},), {"temperatures": [2.0, 0.0]}),
)


def scenario(instance: Instance, world: int):
    """The instance's scenario over ``ROUNDS`` rounds at ``world`` (validated as a scenario file is)."""
    from scenarios.schema import validate  # noqa: PLC0415

    raw = {"name": instance.name, "family": instance.family, "seed": instance.seed, "worlds": [world],
           "size": "cpu", "description": f"serving-pattern step: {instance.name}", "config": dict(instance.config),
           "calls": [dict(call) for call in instance.calls] * ROUNDS, "expect": {"outcome": "golden"}}
    if instance.inputs:
        raw["inputs"] = dict(instance.inputs)
    return validate(raw, f"<serving step {instance.name}>")


@dataclass
class Planned:
    """An instance ready to run at one world: its scenario, family config and static weights."""

    instance: Instance
    scenario: Any
    config: dict
    static: dict

    def call(self, round_index: int, j: int) -> tuple[dict, dict]:
        """``(call_inputs, call_params)`` of call ``j`` in round ``round_index`` (harness form, CPU tensors)."""
        from scenarios.builders import build_call  # noqa: PLC0415

        return build_call(self.scenario, round_index * self.instance.per_round + j, self.config_world)

    @property
    def config_world(self) -> int:
        """The world this instance was planned at."""
        return self.scenario.worlds[0]

    def golden(self, call_inputs: Mapping, call_params: Mapping) -> dict:
        """The unsharded golden outputs of one call (the harness's reference, the architecture's facts)."""
        from harness.families import adapter  # noqa: PLC0415

        return adapter(self.instance.family).reference(self.static, self.config, call_inputs, call_params)


def plan(world: int) -> list[Planned]:
    """Every instance of ``STEP`` at ``world``, in construction order (the same on every rank)."""
    from scenarios.builders import build_static, family_config  # noqa: PLC0415

    planned = []
    for instance in STEP:
        s = scenario(instance, world)
        planned.append(Planned(instance, s, family_config(s, world), build_static(s)))
    return planned


def public_args(family: str, call_inputs: Mapping[str, torch.Tensor], call_params: Mapping[str, Any],
                rank: int) -> dict[str, Any]:
    """What rank ``rank`` passes the public API for one call given in the harness's form.

    allreduce_mhc: ``x`` (or the finalize inputs) of this rank, the mixes as
    they are; markov_sharded: the inputs as they are plus ``query_per_row``
    and ``rows``; markov_fused: the inputs as they are (full vocabulary; each
    rank's loop takes its shard of the head)."""
    args = dict(call_inputs)
    if family == "allreduce_mhc":
        for name in ("x", "gemm2_permuted", "expanded_idx_to_permuted_idx", "shared_output"):
            if name in args:
                args[name] = args[name][rank].contiguous()
        args["finalize"] = bool(call_params["finalize"])
    elif family == "markov_sharded":
        args["query_per_row"] = int(call_params["query_per_row"])
        args["rows"] = int(call_inputs["base_logits"].shape[0])
    elif family != "markov_fused":
        raise ValueError(f"family: expected allreduce_mhc, markov_fused or markov_sharded, got {family!r}")
    return args


# The outputs a call of each family writes (in place or returned), as the golden names them.
OUTPUTS = {"allreduce_mhc": ("residual_out", "layer_input"), "markov_fused": ("tokens", "cache", "emb"),
           "markov_sharded": ("draft_tokens", "logits_cache")}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same dtype, shape and bytes (NaN payloads included)."""
    a, b = a.detach().cpu(), b.detach().cpu()
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def compare(family: str, got: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor]) -> list[str]:
    """The names of ``family``'s outputs whose bits differ (or that are missing) between ``got`` and ``expected``."""
    return [name for name in OUTPUTS[family]
            if name not in got or name not in expected or not same_bits(got[name], expected[name])]


def expected_checks(world: int) -> int:
    """How many output comparisons one rank makes over the whole run: per round and call, eager vs golden,
    replay vs eager and replay vs golden of every output."""
    del world  # every rank makes every call
    per_round = sum(instance.per_round * len(OUTPUTS[instance.family]) for instance in STEP)
    return ROUNDS * per_round * 3


__all__ = ["Instance", "LAYERS", "LAYER_ROWS", "OUTPUTS", "Planned", "ROUNDS", "STEP", "TP_SIZES", "compare",
           "expected_checks", "plan", "public_args", "same_bits", "scenario"]
