"""The harness's ``markov_fused`` kernel system: seed 001's whole draft loop over the public ``MarkovKernels``.

In the seed the kernels run around the caller's own GEMV; here the harness
is that caller. ``FusedMarkovLoop(fabric, static, config, *, bias_fn=None)``
checks the family's config and weights (``docs/interfaces.md``), builds
``kernels.markov_fused.host.MarkovKernels`` over ``w1`` with every variant the
configuration can launch (the step at the config's block and PDL, scalar
and, where the block has one, vector; the pick and both cache fills when
sharded) and, sharded, its device exchange over ``fabric`` (collective;
a world of one in this process when ``fabric`` is None), sized by the
kernel-only config keys ``max_rows`` / ``max_steps`` (default 8 each) with
the deadline ``timeout_ns`` (default ``HARNESS_TIMEOUT_NS``: the harness's
deadline is short, the public API's the ten-minute serving one; both in
``contracts.deadlines``), and runs the bias GEMV once
on zeros so that its first-use work never happens under capture.

``launch(call_inputs, call_params)`` validates the whole call before any
launch (dtypes, shapes, devices, strides; outside capture the anchor and
request-row values, and that every rank calls with the same rows and
steps, which the device exchange cannot check), then drives the loop
exactly as the seed's speculator does: ``anchor_embed``; per step the GEMV
``bias_fn(emb, w2_shard)``, then ``step``, and sharded ``gather_packets``
and ``pick``; after the loop, sharded, ``gather_draft`` and
``cache_fill``. Every launch is on the device with fixed pointers, so the
whole call is captured in one CUDA graph at any tp when ``bias_fn`` can be. The cache is written in place and returned with the tokens
and the last ``emb``. ``bias_fn`` is the harness's
``harness.families.markov_fused.bias.HARNESS_BIAS`` (the adapter passes it:
``HeadGemv``, whose bits the golden models; the default is a plain BF16
matmul; the bench passes ``kernels.markov_fused.head_gemv.HeadGemv``). A
``bias_fn`` with ``capture_problem(dim)`` says whether it can be captured
(``graph_capture_problem``). ``stamps=True`` (bench only,
``harness.bench.breakdown``) builds the steps with phase stamps.

Importing this module imports CuTe DSL (the adapter imports it lazily).
"""

from __future__ import annotations

from typing import Callable

import torch

from contracts.deadlines import MARKOV_FUSED_HARNESS_TIMEOUT_NS
from kernels import hostcopy
from kernels.compile import capturing
from kernels.fabric import FabricMismatch, VirtualFabric
from kernels.markov_fused.host import MarkovKernels, StampedMarkovKernels
from kernels.markov_fused.checks import check_tensor, require
from kernels.markov_fused.layout import BLOCK_SIZES, STEP_STAMPS, WARP, step_scratch_slots, step_stamp_names, vector_bytes

SYSTEM_CLASS = "FusedMarkovLoop"
_CONFIG_KEYS = {"vocab", "dim", "tp", "max_reqs", "has_cap", "mult", "cap", "inv_cap", "block"}
# The harness's exchange deadline: a stalled peer ends the case in seconds (contracts.deadlines).
HARNESS_TIMEOUT_NS = MARKOV_FUSED_HARNESS_TIMEOUT_NS
DEFAULT_MAX_ROWS = DEFAULT_MAX_STEPS = 8


def default_bias(emb: torch.Tensor, w2_shard: torch.Tensor) -> torch.Tensor:
    """The Markov head GEMV as a plain BF16 torch matmul (benchmarks)."""
    return emb @ w2_shard.t()


class _Solo:
    """World of one without a fabric (unsharded loops need no exchange)."""

    rank, world = 0, 1


def _exchange_limits(config: dict) -> tuple[int, int, int]:
    """The kernel-only ``max_rows``, ``max_steps`` and ``timeout_ns`` of the config (defaults above)."""
    limits = []
    for key, default in (("max_rows", DEFAULT_MAX_ROWS), ("max_steps", DEFAULT_MAX_STEPS),
                         ("timeout_ns", HARNESS_TIMEOUT_NS)):
        value = config.get(key, default)
        require(isinstance(value, int) and not isinstance(value, bool) and value >= (0 if key == "timeout_ns" else 1),
                ValueError, f"config.{key}: expected an int >= {0 if key == 'timeout_ns' else 1}, got {value!r}")
        limits.append(value)
    return tuple(limits)


class FusedMarkovLoop:
    """The fused Markov draft loop of one rank (seed 001) for the harness, over ``MarkovKernels``.

    ``fabric`` is a ``kernels.fabric`` provider of ``tp`` ranks (None: a
    world of one); ``static`` holds ``w1`` and ``w2`` (full, BF16 ``[V, R]``,
    on the GPU); ``config`` the family's keys (``vocab, dim, tp, max_reqs,
    has_cap, mult, cap, inv_cap, block``) plus optional kernel-only ``pdl``
    (bool), ``sharded`` (default ``tp > 1``), ``max_rows``, ``max_steps`` and
    ``timeout_ns`` (module docstring).
    ``bias_fn(emb, w2_shard) -> [rows, shard]`` BF16 computes the GEMV.
    ``stamps`` (bench only): the step kernels with ``%globaltimer`` phase
    stamps (``StepKernel``); ``stamps()`` returns the last call's.
    """

    def __init__(self, fabric, static: dict, config: dict, *, bias_fn: Callable | None = None,
                 stamps: bool = False, flight_recorder: bool = True) -> None:
        comm = fabric if fabric is not None else _Solo()
        for attr in ("rank", "world"):
            require(hasattr(comm, attr), TypeError, f"fabric: expected a kernels.fabric provider (missing {attr!r})")
        require(isinstance(config, dict), TypeError, f"config: expected a dict, got {type(config).__name__}")
        missing = sorted(_CONFIG_KEYS - set(config))
        require(not missing, ValueError, f"config: missing keys {missing}")
        vocab, dim, tp = int(config["vocab"]), int(config["dim"]), int(config["tp"])
        require(vocab >= 1, ValueError, f"config.vocab: expected >= 1, got {vocab}")
        require(dim >= 1, ValueError, f"config.dim: expected >= 1, got {dim}")
        require(tp >= 1 and tp <= WARP and tp & (tp - 1) == 0, ValueError, f"config.tp: expected a power of two in [1, 32], got {tp}")
        require(comm.world == tp, ValueError, f"fabric: world {comm.world} != config.tp {tp}")
        require(vocab % tp == 0, ValueError, f"config.vocab: {vocab} is not divisible by tp {tp}")
        block = int(config["block"])
        require(block in BLOCK_SIZES, ValueError, f"config.block: expected one of {BLOCK_SIZES}, got {block}")
        max_reqs = int(config["max_reqs"])
        require(max_reqs >= 1, ValueError, f"config.max_reqs: expected >= 1, got {max_reqs}")
        for key in ("mult", "cap", "inv_cap"):
            require(isinstance(config[key], (int, float)), TypeError, f"config.{key}: expected a float")
        self.comm = comm
        self.max_rows, self.max_steps, self.timeout_ns = _exchange_limits(config)
        self.rank, self.tp = int(comm.rank), tp
        self.vocab, self.dim, self.block, self.max_reqs = vocab, dim, block, max_reqs
        self.width = vocab // tp
        self.vocab_offset = self.rank * self.width
        self.has_cap = bool(config["has_cap"])
        self.pdl = bool(config.get("pdl", False))
        self.sharded = bool(config.get("sharded", tp > 1))
        require(self.sharded or tp == 1, ValueError, "config.sharded: must be true when tp > 1")
        # FP32 scalars as the kernels see them (round to nearest once here).
        self.mult, self.cap, self.inv_cap = (float(torch.tensor(float(config[k]), dtype=torch.float32)) for k in ("mult", "cap", "inv_cap"))
        require(isinstance(static, dict), TypeError, f"static: expected a dict, got {type(static).__name__}")
        for key in ("w1", "w2"):
            require(key in static, ValueError, f"static: missing {key!r}")
        w1, w2 = static["w1"], static["w2"]
        require(isinstance(w1, torch.Tensor) and w1.is_cuda, ValueError, "static.w1: expected a CUDA tensor")
        self.device = w1.device
        check_tensor("static.w1", w1, torch.bfloat16, (vocab, dim), self.device)
        check_tensor("static.w2", w2, torch.bfloat16, (vocab, dim), self.device)
        require(w1.is_contiguous(), ValueError, "static.w1: expected a contiguous (row-major) tensor")
        self.w1 = w1
        self.w2_shard = w2[self.vocab_offset : self.vocab_offset + self.width]
        self.bias_fn = bias_fn if bias_fn is not None else default_bias
        self.blocks = -(-self.width // block)
        self._launches = 0
        self.stamped = bool(stamps)
        self._stamp_scratch: tuple[int, int, torch.Tensor] | None = None  # (rows, steps, scratch) of the last call
        # Every call's emb is a fresh allocation, aligned as this one.
        embeds = torch.empty(max_reqs, dim, dtype=torch.bfloat16, device=self.device)
        vectors = (False, True) if vector_bytes(block) else (False,)
        # The bias GEMV runs here on zeros at every row count a call may have, so its first-use work (library
        # handles, workspaces, lazily loaded kernels) never happens under capture, nor while a peer's exchange
        # spins (loading a kernel waits for the context to idle).
        for rows in range(1, self.max_rows + 1):
            self.bias_fn(torch.zeros(rows, self.dim, dtype=torch.bfloat16, device=self.device), self.w2_shard)
        exchange = {}
        if self.sharded:
            group = fabric if fabric is not None else VirtualFabric.create(1, self.device)[0]
            require(hasattr(group, "alloc"), TypeError, "fabric: a sharded loop needs a kernels.fabric provider "
                    "(its device exchange allocates peer buffers)")
            exchange = dict(group=group, max_rows=self.max_rows, max_steps=self.max_steps, timeout_ns=self.timeout_ns)
        self.kernels = (StampedMarkovKernels if self.stamped else MarkovKernels)(
            w1, embeds, width=self.width, has_cap=self.has_cap, tp=tp if self.sharded else None,
            steps=[(block, self.pdl, vector) for vector in vectors], pick_pdl=self.pdl, fill_vector=(False, True),
            rank=self.rank, flight_recorder=flight_recorder, **exchange,
        )
        self.diag_record = self.kernels.diag_record


    # -- validation --------------------------------------------------------

    def _validate(self, call_inputs: dict) -> tuple[int, int]:
        """Check every call input (before any launch); returns (rows, steps)."""
        require(isinstance(call_inputs, dict), TypeError, f"call_inputs: expected a dict, got {type(call_inputs).__name__}")
        need = ("input_ids", "anchor_idx", "base", "idx_map", "pos", "seeds", "temperature", "cache")
        missing = [k for k in need if k not in call_inputs]
        require(not missing, ValueError, f"call_inputs: missing {missing}")
        base = call_inputs["base"]
        require(isinstance(base, torch.Tensor) and base.dim() == 3, ValueError,
                 f"call_inputs.base: expected a [rows, steps, {self.vocab}] tensor")
        rows, steps, vocab = base.shape
        require(rows >= 1 and steps >= 1, ValueError, f"call_inputs.base: rows and steps must be >= 1, got {tuple(base.shape)}")
        dev = self.device
        ids = call_inputs["input_ids"]
        require(isinstance(ids, torch.Tensor) and ids.dim() == 1 and ids.numel() >= 1, ValueError,
                 "call_inputs.input_ids: expected a non-empty 1-D tensor")
        check_tensor("call_inputs.input_ids", ids, torch.int32, (ids.shape[0],), dev)
        check_tensor("call_inputs.anchor_idx", call_inputs["anchor_idx"], torch.int64, (rows,), dev)
        check_tensor("call_inputs.base", base, torch.bfloat16, (rows, steps, self.vocab), dev)
        check_tensor("call_inputs.idx_map", call_inputs["idx_map"], torch.int64, (rows, steps), dev)
        check_tensor("call_inputs.pos", call_inputs["pos"], torch.int64, (rows, steps), dev)
        check_tensor("call_inputs.seeds", call_inputs["seeds"], torch.int64, (self.max_reqs,), dev)
        check_tensor("call_inputs.temperature", call_inputs["temperature"], torch.float32, (self.max_reqs,), dev)
        check_tensor("call_inputs.cache", call_inputs["cache"], torch.bfloat16, (self.max_reqs, steps, self.vocab), dev)
        for name, stride in (("input_ids", ids.stride(0)), ("anchor_idx", call_inputs["anchor_idx"].stride(0)),
                             ("seeds", call_inputs["seeds"].stride(0)), ("temperature", call_inputs["temperature"].stride(0)),
                             ("base", base.stride(2)), ("cache", call_inputs["cache"].stride(2))):
            require(stride == 1, ValueError, f"call_inputs.{name}: expected stride 1 in its last dimension, got {stride}")
        for name in ("base", "cache", "idx_map", "pos"):
            require(all(s >= 0 for s in call_inputs[name].stride()), ValueError, f"call_inputs.{name}: negative strides")
        if not torch.cuda.is_current_stream_capturing():
            # Values (not capturable: they need the host); under capture the
            # kernels clamp instead (kernels/markov_fused/host.py).
            # Read through pinned host copies: no reduction kernel, so nothing is first loaded (which needs the
            # context idle) while a peer's exchange spins.
            anchor = hostcopy.to_host(call_inputs["anchor_idx"])
            lo, hi = int(anchor.min()), int(anchor.max())
            require(lo >= 0 and hi < ids.shape[0], ValueError,
                     f"call_inputs.anchor_idx: values must lie in [0, {ids.shape[0]}), got [{lo}, {hi}]")
            hi = int(hostcopy.to_host(call_inputs["idx_map"]).max())
            require(hi < self.max_reqs, ValueError,
                     f"call_inputs.idx_map: request rows must be < max_reqs {self.max_reqs} (negative = padding), got {hi}")
        return rows, steps

    def _check_bias(self, bias, rows: int) -> None:
        """The bias callable's output for one step."""
        check_tensor("bias_fn output", bias, torch.bfloat16, (rows, self.width), self.device)
        require(bias.stride(1) == 1, ValueError, f"bias_fn output: expected stride 1 in its last dimension, got {bias.stride(1)}")

    def _check_same_call(self, rows: int, steps: int) -> None:
        """Sharded over several ranks: every rank calls with this ``(rows, steps)`` (read through the fabric on
        the host; the device exchange would take mismatched sizes without noticing)."""
        require(rows <= self.max_rows and steps <= self.max_steps, ValueError,
                f"call_inputs.base: {rows} rows x {steps} steps exceed config.max_rows {self.max_rows} x "
                f"config.max_steps {self.max_steps} (the exchange's size)")
        if self.tp == 1 or capturing():
            return
        sizes = self.comm.all_gather(torch.tensor([rows, steps], dtype=torch.int64)).tolist()
        for rank, (other_rows, other_steps) in enumerate(sizes):
            if (other_rows, other_steps) != (rows, steps):
                raise FabricMismatch(
                    f"rank {rank} calls the draft loop with {other_rows} rows x {other_steps} steps where rank "
                    f"{self.rank} has {rows} x {steps}: every rank must make the same call")

    # -- the call ----------------------------------------------------------

    def launch(self, call_inputs: dict, call_params: dict | None = None) -> dict:
        """One call of the draft loop over the public kernels: anchor, per step bias + step (+ gather and
        pick), then (sharded) gather and cache fill. The cache is written in place and returned with the
        tokens and the last ``emb``."""
        rows, steps = self._validate(call_inputs)
        if self.sharded:
            self._check_same_call(rows, steps)
        del call_params  # this family has no per-call parameters
        dev, kernels = self.device, self.kernels
        ids, anchor = call_inputs["input_ids"], call_inputs["anchor_idx"]
        base, cache = call_inputs["base"], call_inputs["cache"]
        idx_map, pos = call_inputs["idx_map"], call_inputs["pos"]
        seeds, temperature = call_inputs["seeds"], call_inputs["temperature"]
        emb = torch.empty(rows, self.dim, dtype=torch.bfloat16, device=dev)
        arrivals = torch.empty(rows, dtype=torch.int32, device=dev)
        tokens = torch.empty(rows, steps, dtype=torch.int64, device=dev)
        # Zeros only for stamps (a stamp never stored reads 0); otherwise no fill kernel.
        scratch = (torch.zeros if self.stamped else torch.empty)(
            step_scratch_slots(rows, self.blocks, steps, self.stamped), dtype=torch.int64, device=dev)
        block_argmax = scratch[: rows * self.blocks]
        if self.stamped:
            self._stamp_scratch = (rows, steps, scratch)
        block_max = torch.empty(rows * self.blocks, dtype=torch.float32, device=dev)
        packets = torch.empty(rows, 4, dtype=torch.int32, device=dev)
        draft = torch.empty(rows, steps, self.width, dtype=torch.bfloat16, device=dev) if self.sharded else None
        self._launches += 1
        kernels.anchor_embed(ids, anchor, emb, arrivals)
        for col in range(steps):
            bias = self.bias_fn(emb, self.w2_shard)
            self._check_bias(bias, rows)
            kernels.step(
                base[:, col], bias, draft if self.sharded else cache, col, idx_map[:, col], pos[:, col], seeds,
                temperature, block_argmax, block_max, arrivals, tokens, emb, packets, self.vocab_offset,
                self.mult, self.inv_cap, self.cap, block=self.block, pdl=self.pdl,
            )
            if self.sharded:
                kernels.pick(kernels.gather_packets(packets, col), rows, tokens, col, emb)
        if self.sharded:
            shards = kernels.gather_draft(draft)
            kernels.cache_fill(shards, rows * steps * self.width, cache, idx_map, rows, steps, self.width, self.vocab)
        return {"tokens": tokens, "cache": cache, "emb": emb}

    def stamps(self) -> tuple[tuple[str, ...], torch.Tensor]:
        """The stamp names and the last call's int64 ``[rows * blocks, names]`` ``%globaltimer`` values (ns), on the host."""
        require(self.stamped and self._stamp_scratch is not None, RuntimeError,
                 "stamps: this loop was built without stamps=True, or has not run")
        rows, steps, scratch = self._stamp_scratch
        slots = rows * self.blocks
        names = step_stamp_names(steps)
        values = hostcopy.to_host(scratch[slots:]).view(steps, slots, len(STEP_STAMPS))
        return names, values.permute(1, 0, 2).reshape(slots, len(names))

    def state(self) -> dict:
        """Plain ints for progress records: the number of calls launched."""
        return {"launches": self._launches}

    def graph_capture_problem(self) -> str | None:
        """Why a launch cannot be captured into a CUDA graph: the bias GEMV's reason, else None (every launch of a
        call is on the device, compiled at construction, the exchange's counter kept on the device)."""
        bias_problem = getattr(self.bias_fn, "capture_problem", None)
        if callable(bias_problem) and bias_problem(self.dim) is not None:
            return f"the bias GEMV: {bias_problem(self.dim)}"
        return None


__all__ = ["DEFAULT_MAX_ROWS", "DEFAULT_MAX_STEPS", "FusedMarkovLoop", "HARNESS_TIMEOUT_NS", "SYSTEM_CLASS", "default_bias"]
