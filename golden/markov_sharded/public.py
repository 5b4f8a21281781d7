"""Golden stand-in of ``kernels.markov_sharded.host.ShardedMarkovSampler`` (seed 000), computed by ``golden.markov_sharded``.

``ShardedMarkovSampler`` here takes the kernel class's constructor
arguments and ``__call__`` (same names, defaults, return value: the
caller's ``draft_tokens``, written in place with ``logits_cache``) and
``state()`` (``{"launches"}``, the uint32 launch counter from
``launch_counter_start``), and gives the same bits: each call is one
``launch`` of the golden system ``golden.markov_sharded.GoldenMarkovSharded``
over ``group`` (a ``golden.comm.Comm``). The bias accumulation and the
``div.full.f32`` reciprocals are facts of the GPU the kernel runs on: the
stand-in takes them from the architecture's measured facts
(``golden.arch.load_facts(arch)``: ``mma_model`` and ``reciprocals``), the
golden-only keyword ``arch`` (default ``sm_90``, the H200's), as the
harness passes them to the golden system.

From the public call to the golden's form. The public call may pass the
base logits and the noise as this rank's columns ``[..., V/world]``; the
golden's form is the whole vocabulary, of which a rank reads only its own
columns, so such a shard is placed at its columns of a zero tensor of the
full width (the other columns are never read).

Flight launches (``flight_launches``): one ``sample`` launch per call,
counted from 0 (the flight recorder's counter is not the sampler's launch
counter: it does not start at ``launch_counter_start``). No ring is kept
(``flight_recorder`` is None whatever the flag).

Not modelled: deadlines (``timeout_ns`` is checked as the config's, then
ignored: a missing peer ends in ``golden.comm.CollectiveTimeout``, ranks
that disagree on the launch counter in the golden's ``RuntimeError`` naming
the tag), grids (``ctas``, ``ranks_per_device``), phase stamps (``stamps()``
raises), memory (device, contiguity, alignment; ``device`` must be None or
a CPU device), and CUDA-graph capture (values are always checked, as the
kernel checks them outside capture). Argument errors are the family
contract's (``contracts.markov_sharded``, as the kernel's host checks),
raised before anything changes and naming the public argument.
"""

from __future__ import annotations

from typing import Any

import torch

from contracts import markov_sharded as contract
from contracts.constructor import public_args, takes
from golden.arch import load_facts
from golden.comm import shard_bounds
from golden.markov_sharded import GoldenMarkovSharded
from golden.public.common import (
    DEFAULT_ARCH,
    LaunchCount,
    argument_names,
    check_device,
    check_flag,
    comm_of,
    describe,
)


def _argument_name(name: str) -> str:
    """How the public call's errors name an argument: by its name."""
    return name


def _full_width(tensor: torch.Tensor, vocab: int, first: int) -> torch.Tensor:
    """``tensor`` as the golden's full-vocabulary form: as given when it is, else its columns placed at ``first``."""
    if tensor.shape[-1] == vocab:
        return tensor
    full = torch.zeros((*tensor.shape[:-1], vocab), dtype=tensor.dtype, device=tensor.device)
    full[..., first : first + tensor.shape[-1]] = tensor
    return full


class ShardedMarkovSampler:
    """Golden stand-in of ``kernels.markov_sharded.host.ShardedMarkovSampler``: same constructor, ``__call__``, ``state``.

    ``group``: a ``golden.comm.Comm`` (None: world 1); ``device``: None or
    a CPU device; ``arch`` (golden only): whose measured facts give the
    bias model and reciprocals. The rest is the kernel class's (module
    docstring: what is and is not modelled).
    """

    # The caller's buffers each method writes in place, bit for bit as the kernel (besides what it returns).
    WRITES = {"__call__": ("draft_tokens", "logits_cache")}
    # Buffers the kernel writes with values the stand-in does not model (none here).
    SCRATCH: dict[str, tuple[str, ...]] = {}

    @takes(contract.constructor, arch=DEFAULT_ARCH)
    def __init__(self, arguments: dict[str, Any], arch: str) -> None:
        self.public_args = public_args(arguments)
        embed_table, head = arguments["embed_table"], arguments["head"]
        check_device(arguments["device"])
        check_flag("flight_recorder", arguments["flight_recorder"])
        comm = comm_of(arguments["group"])
        if not isinstance(embed_table, torch.Tensor) or embed_table.dim() != 2:
            raise ValueError(f"embed_table: expected a BF16 [V, 256] tensor, got {describe(embed_table)}")
        options = contract.public_options(arguments, embed_table.shape[0], comm.world)
        self.cfg = contract.check_config(options, comm.world, world_source="group", require_world=False)
        facts = load_facts(arch)
        self._golden = GoldenMarkovSharded(comm, {"embed_table": embed_table, "head": head},
                                           {**options, "bias_fn": facts.mma_model, "rcp_table": facts.reciprocals})
        self.rank, self.world = comm.rank, comm.world
        self.first, _ = shard_bounds(self.cfg.vocab, comm.world, comm.rank)
        self.timeout_ns = self.cfg.timeout_ns
        self.stamped = bool(arguments["stamps"])
        self.flight_recorder = None
        self._launches = LaunchCount()

    @property
    def flight_launches(self) -> int:
        """Kernel launches so far as the kernel's flight recorder numbers them (one per call)."""
        return self._launches.value

    def state(self) -> dict:
        """The uint32 launch counter (the tag of the next launch is ``1 + launches % 32767``)."""
        return self._golden.state()

    def stamps(self) -> tuple:
        """Phase stamps are the GPU's timings: the stand-in has none (``RuntimeError``)."""
        raise RuntimeError("stamps: the golden stand-in models no timings")

    def __call__(self, base_logits, input_ids, query_per_row, idx_mapping, temperature, noise, logits_cache,
                 draft_tokens, rows=None):
        """Draft ``steps`` tokens for ``rows`` request rows (the kernel's ``__call__``; ``draft_tokens`` returned).

        ``draft_tokens`` and ``logits_cache`` are written in place.
        """
        cfg = self.cfg
        params = {"query_per_row": query_per_row} if rows is None else {"query_per_row": query_per_row, "rows": rows}
        rows, _ = contract.check_params(cfg, params, base_logits, _argument_name, _argument_name)
        given = dict(base_logits=base_logits, idx_mapping=idx_mapping, temperature=temperature, noise=noise,
                     logits_cache=logits_cache)
        for name, spec in contract.call_specs(cfg, rows, local_base=True, local_noise=True).items():
            contract.check_tensor(name, given[name], spec)
        contract.check_input_ids(input_ids, rows, query_per_row, _argument_name)
        shape = (rows, cfg.steps)
        if not isinstance(draft_tokens, torch.Tensor):
            raise TypeError(f"draft_tokens: expected an int64 tensor of shape {shape}, got {describe(draft_tokens)}")
        if draft_tokens.dtype != torch.int64 or tuple(draft_tokens.shape) != shape:
            raise ValueError(f"draft_tokens: expected an int64 tensor of shape {shape}, got {describe(draft_tokens)}")
        call_inputs = dict(given, input_ids=input_ids, base_logits=_full_width(base_logits, cfg.vocab, self.first),
                           noise=_full_width(noise, cfg.vocab, self.first))
        with argument_names():
            outputs = self._golden.launch(call_inputs, params)
        self._launches.add(1)
        draft_tokens.copy_(outputs["draft_tokens"])
        logits_cache.copy_(outputs["logits_cache"])
        return draft_tokens


# The kernel class (by module and name) this module stands in for; ``golden.public`` merges every family's.
STAND_INS = {"kernels.markov_sharded.host.ShardedMarkovSampler": ShardedMarkovSampler}

__all__ = ["STAND_INS", "ShardedMarkovSampler"]
