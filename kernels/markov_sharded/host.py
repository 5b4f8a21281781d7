"""Seed 000's sharded Markov sampler: the public API of the ``markov_sharded`` family.

``ShardedMarkovSampler(embed_table, head, *, steps, base_dtype, cache_dtype,
max_rows, max_reqs, group)`` is one rank of the chain, built collectively
over the TP group (``group``: a ``torch.distributed`` group, buffers from
torch symmetric memory, or a ``kernels.fabric`` provider). A speculator step
calls it on its own tensors, ``sampler(base_logits, input_ids,
query_per_row, idx_mapping, temperature, noise, logits_cache, draft_tokens,
rows)``: one launch of ``ShardedMarkovSample`` (``kernel.py``: the
arithmetic, the work split and the memory ordering) that writes
``draft_tokens`` and ``logits_cache`` in place (fixed pointers, so the call
can be captured in a CUDA graph); ``state() -> {"launches"}`` reports the
launch counter. The harness's generic ``launch(call_inputs, call_params)``
lives in ``harness/families/markov_sharded/kernel.py`` and calls this API.

Construction is collective over the fabric's ranks: the configuration and
the static weights are checked (``checks.py``), the kernel variant
``(steps, base_dtype, cache_dtype)`` is compiled (or taken from the
process-wide cache of ``kernels.compile``), then every rank allocates its peer buffer
``markov_sharded.peer`` (``uint8``, ``layout.peer_buffer_bytes``:
mailbox, then both parities of staging) through ``fabric.alloc`` (zero
filled: no record carries a tag), loads the variant's code into the context
(``kernels.loading.preload``: under CUDA's lazy loading a first launch would
load it and wait for the device, which never idles while a peer's grid
spins), and the ranks meet in ``fabric.barrier()`` so no rank launches
before every rank finished construction (compile, preload, peer buffer,
control words) and none posts into a buffer a peer has not set up.

The launch path runs no CUDA kernel besides the sampler's (value checks read
host copies), so no first use of some other kernel has to be loaded while a
peer's grid waits for this rank; and every copy between host and device goes
through ``kernels.hostcopy`` (pinned memory), because a pageable copy waits
behind another virtual rank's pageable copy, which may wait for a kernel that
waits for this rank.

``kernel_arguments`` builds the launch's 27 scalar arguments (addresses,
strides, sizes) from the checked call alone, so the CPU tests pin the
addresses and offsets the kernel receives against the seed's layout.

Owned by this instance: the peer buffer (peers store into it, this rank
polls and copies from it), the control words (local ``int32
[CONTROL_WORDS]``: rank-local maxima, arrival counts, the uint32 launch
counter starting at ``config.launch_counter_start``, end count; only this
rank's kernels touch them), and, with ``timeout_ns > 0``, the pinned
``kernels.diag.DiagRecord`` a timed-out kernel writes (``diag_record``).

Launch counter: the kernel reads it at the start (tag ``1 + launches %
32767``, parity ``launches & 1``) and its last CTA advances it, so graph
replays advance it as eager launches do; ``state()`` reads it from the
device (after this stream's work). Ranks must launch in lockstep: a rank that
skips a launch leaves the others polling for its tag until their timeout.

Grid: ``config.ctas`` or an equal share of the device's SMs among the ranks
that share it (``VirtualFabric``: all of them; otherwise
``config.ranks_per_device``, default 1), capped at what one tile per warp
needs. Every rank's grid must be resident at once (the mailbox wait is the
grid barrier), which is checked against the SM count before any launch.
The launch is cooperative only when this rank has its GPU to itself
(``cooperative_launch``): ranks sharing a GPU (virtual ranks, or
``ranks_per_device > 1``) launch plainly, as the all-reduce kernels do.
Cooperative launch guarantees co-residency of one grid, never of several
ranks' grids; those are co-resident because the host gives each rank its
share of the SMs, one 512-thread CTA per SM.

Phase stamps (bench only, ``stamps=True``): the variant with
``%globaltimer`` stamps compiled in (``kernel``'s docstring), the
control words followed by its int64 ``[ctas][stamp_names(steps)]`` buffer
(``layout.control_words``); ``stamps()`` copies the last launch's to
the host. ``harness.bench.breakdown`` reads them.

Nothing compiles in ``__call__``; a call may be captured into a CUDA graph
once the instance exists (value checks are skipped under capture, inputs
must already be on the device).
"""

from __future__ import annotations

import threading
from typing import Any

import torch

from contracts import markov_sharded as contract
from contracts.constructor import public_args, takes
from kernels import hostcopy
from kernels.compile import CaptureError, capturing, compiled, preload
from kernels.fabric import fabric_of
from kernels.flight import flight_args, flight_recorder_of
from kernels.markov_sharded.checks import (
    CallArgs,
    SamplerConfig,
    argument_label,
    check_call,
    check_config,
    check_static,
)
from kernels.markov_sharded.layout import (
    DTYPE_BYTES,
    LAUNCH_WORD,
    MAX_STEPS,
    STAMP_WORD,
    control_words,
    default_ctas,
    peer_buffer_bytes,
    stamp_names,
)

PEER_BUFFER_NAME = "markov_sharded.peer"

# Virtual ranks launch from several threads; enqueueing is cheap.
_LAUNCH_LOCK = threading.Lock()


# The stamped variants the compile gate checks: the bench's and the widest cache.
STAMPED_GATE_VARIANTS = ((MAX_STEPS, "bfloat16", "bfloat16"), (MAX_STEPS, "float32", "float32"))


def compiled_kernel(
    steps: int, base_dtype: str, cache_dtype: str, options: str | None = None, *, cooperative: bool = True,
    stamps: bool = False, flight: bool = True,
):
    """The compiled ``ShardedMarkovSample`` variant (``kernels.compile``: cached by configuration, launch kind,
    stamps and options; ``CaptureError`` instead of compiling under capture)."""
    from kernels.markov_sharded.kernel import ShardedMarkovSample  # CuTe DSL, imported on first compile

    return compiled(ShardedMarkovSample(steps, base_dtype, cache_dtype, cooperative, stamps, flight=flight), options,
                    remedy="construct the ShardedMarkovSampler")


def compile_variants(arch: str):
    """The compile gate's entries (``harness/compile_gate.py``): every steps x
    (base, cache) dtype variant, none allowed to spill."""
    del arch  # the gate's options select the target
    variants = []
    for steps in range(1, MAX_STEPS + 1):
        for base in DTYPE_BYTES:
            for cache in DTYPE_BYTES:
                variants.append((
                    f"markov_sharded.sample[s{steps},{base}/{cache}]",
                    lambda options, s=steps, b=base, c=cache: compiled_kernel(s, b, c, options),
                    True,
                ))
    variants.append((
        f"markov_sharded.sample[s{MAX_STEPS},bfloat16/bfloat16,noflight]",
        lambda options: compiled_kernel(MAX_STEPS, "bfloat16", "bfloat16", options, flight=False),
        True,
    ))
    for steps, base, cache in STAMPED_GATE_VARIANTS:
        variants.append((
            f"markov_sharded.sample[s{steps},{base}/{cache},stamps]",
            lambda options, s=steps, b=base, c=cache: compiled_kernel(s, b, c, options, stamps=True),
            True,
        ))
    return variants


def _describe(value: Any) -> str:
    """A short description of an argument for an error message: dtype, shape and device, or its type."""
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {tuple(value.shape)} on {value.device}"
    return type(value).__name__


def _ranks_sharing_device(fabric: Any, cfg: SamplerConfig) -> int:
    """How many ranks' grids share this rank's GPU."""
    if cfg.ranks_per_device is not None:
        return cfg.ranks_per_device
    return cfg.world if getattr(fabric, "provider", None) == "virtual" else 1


def cooperative_launch(fabric: Any, cfg: SamplerConfig) -> bool:
    """Whether this rank launches cooperatively: only when no other rank's grid shares its GPU."""
    return _ranks_sharing_device(fabric, cfg) == 1


class ShardedMarkovSampler:
    """Seed 000's sharded Markov draft chain, one rank of it: launched per speculator step on the caller's tensors.

    Construction is collective over the TP group: it checks the arguments and
    the weights, compiles the ``ShardedMarkovSample`` variant ``(steps,
    base_dtype, cache_dtype)``, allocates the peer buffer and control words
    and meets the other ranks (module docstring).

    Args:
        embed_table: [V, 256] BF16 Markov embedding table (full, row-major, 16-byte aligned).
        head: [V, 256] BF16 Markov head (full; this rank keeps rows
            [rank * V/world, (rank + 1) * V/world)).
        steps: draft positions per launch (1..8), compiled in.
        base_dtype: ``"bfloat16"`` or ``"float32"`` (or the torch dtype): the base logits' type.
        cache_dtype: the same for the draft-logits cache.
        max_rows: the most request rows of one launch (<= 8).
        max_reqs: rows of the request-state tensors (temperature, cache).
        group: a ``torch.distributed`` process group (torch symmetric memory;
            None: the default group) or a ``kernels.fabric`` provider.
        device: this rank's CUDA device (default: the fabric's, or the current one).
        shard_only_base: documents that the caller passes only its columns of
            the base logits (both forms are accepted).
        launch_counter_start: the uint32 launch counter's first value.
        timeout_ns: a mailbox wait past it writes the ``kernels.diag`` record
            and traps (0: waits forever; default 10 minutes, the
            ``kernels.diag`` deadline policy).
        ctas: CTAs per rank (default: an equal share of the SMs among the ranks sharing the GPU).
        ranks_per_device: ranks sharing this GPU (default: the world for a
            ``VirtualFabric``, else 1).
        diag: the ``kernels.diag.DiagRecord`` to write (default: one of its own, ``diag_record``).
        stamps: compile the bench-only phase stamps in (module docstring; default off).
        flight_recorder: compile the flight recorder in and keep this instance's ring
            (``kernels.flight``; ``flight_recorder`` attribute; default on).
        flight_dir: the directory of the ring file (default ``kernels.flight.default_directory()``).
    """

    @takes(contract.constructor)
    def __init__(self, arguments: dict[str, Any]) -> None:
        # The constructor's data arguments by name as passed (not group, device, diag, flight_dir), enough to
        # rebuild an equal object elsewhere (golden.public.ShardedMarkovSampler).
        self.public_args = public_args(arguments)
        embed_table, head, stamps = arguments["embed_table"], arguments["head"], arguments["stamps"]
        self._flight_launches = 0
        fabric = fabric_of(arguments["group"], arguments["device"])
        for attr in ("rank", "world", "device", "alloc", "barrier"):
            if not hasattr(fabric, attr):
                raise TypeError(f"fabric: expected a kernels.fabric provider (missing {attr!r}), got {type(fabric).__name__}")
        vocab = embed_table.shape[0] if isinstance(embed_table, torch.Tensor) and embed_table.dim() == 2 else 0
        if vocab == 0:
            raise ValueError(f"embed_table: expected a BF16 [V, 256] tensor, got {_describe(embed_table)}")
        self.cfg = check_config(contract.public_options(arguments, vocab, fabric.world), fabric.world)
        cfg = self.cfg
        self.fabric = fabric
        self.rank = int(fabric.rank)
        self.device = torch.device(fabric.device)
        if self.device.type != "cuda":
            raise ValueError(f"fabric: the device must be CUDA, got {self.device}")
        self.embed_table, head = check_static({"embed_table": embed_table, "head": head}, cfg, self.device)
        first = self.rank * cfg.vocab_local
        self.head_shard = head[first : first + cfg.vocab_local]
        sm_count = torch.cuda.get_device_properties(self.device).multi_processor_count
        sharing = _ranks_sharing_device(fabric, cfg)
        self.ctas = cfg.ctas if cfg.ctas is not None else default_ctas(sm_count, sharing, cfg.vocab_local)
        if self.ctas * sharing > sm_count:
            raise ValueError(
                f"config['ctas']: {self.ctas} CTAs x {sharing} ranks on this GPU exceed its {sm_count} SMs; every "
                "rank's grid must be resident at once (one 512-thread CTA per SM)"
            )
        self.timeout_ns = cfg.timeout_ns
        self.diag_record = arguments["diag"]
        if self.timeout_ns and self.diag_record is None:
            from kernels.diag import DiagRecord

            self.diag_record = DiagRecord()
        # Compile before the collective allocation: a rank that cannot
        # compile fails here instead of leaving the others in the rendezvous.
        self.cooperative = cooperative_launch(fabric, cfg)
        self.stamped = bool(stamps)
        self.flight_recorder = flight_recorder_of(arguments["flight_recorder"], "markov_sharded", self.rank,
                                                  fabric.world, self.device, arguments["flight_dir"])
        self._kernel = compiled_kernel(cfg.steps, cfg.base_dtype, cfg.cache_dtype, cooperative=self.cooperative,
                                       stamps=self.stamped, flight=self.flight_recorder is not None)
        with torch.cuda.device(self.device):
            preload(self._kernel)
        self.peer = fabric.alloc(
            PEER_BUFFER_NAME,
            peer_buffer_bytes(max_rows=cfg.max_rows, steps=cfg.steps, vocab=cfg.vocab, cache_bytes=cfg.cache_bytes),
        )
        self.control = torch.zeros(control_words(stamps=self.stamped, ctas=self.ctas, steps=cfg.steps),
                                   dtype=torch.int32, device=self.device)
        start = cfg.launch_counter_start
        self.control[LAUNCH_WORD] = start - (1 << 32) if start >= 1 << 31 else start
        self._launches = start
        fabric.barrier()

    @property
    def flight_launches(self) -> int:
        """The ``sample`` kernels this instance launched outside CUDA-graph capture (one per call), counted on the
        host from 0: the flight recorder's number of its next launch (record word 0) while no graph holding its
        launches has been replayed (a replay advances only the device's counter, unread without a sync)."""
        return self._flight_launches

    def state(self) -> dict:
        """The uint32 launch counter (read from the device after this stream's work; the host count while capturing)."""
        if capturing():
            return {"launches": self._launches}
        return {"launches": int(hostcopy.to_host(self.control[LAUNCH_WORD : LAUNCH_WORD + 1])[0]) & 0xFFFFFFFF}

    def stamps(self) -> tuple[tuple[str, ...], torch.Tensor]:
        """The stamp names and the last launch's int64 ``[ctas, stamps]`` ``%globaltimer`` values (ns), on the host."""
        if not self.stamped:
            raise RuntimeError("stamps: this sampler was built without stamps=True")
        names = stamp_names(self.cfg.steps)
        words = hostcopy.to_host(self.control[STAMP_WORD:])
        return names, words.view(torch.int64).view(self.ctas, len(names))

    def __call__(
        self,
        base_logits: torch.Tensor,
        input_ids: torch.Tensor,
        query_per_row: int,
        idx_mapping: torch.Tensor,
        temperature: torch.Tensor,
        noise: torch.Tensor,
        logits_cache: torch.Tensor,
        draft_tokens: torch.Tensor,
        rows: int | None = None,
    ) -> torch.Tensor:
        """Draft ``steps`` tokens for ``rows`` request rows: one launch of the chain on this rank.

        Every rank of the group must call it with the same ``rows`` and
        ``query_per_row``, in the same order (the ranks exchange per step).

        Args:
            base_logits: [rows, steps, V] or this rank's columns [rows, steps,
                V/world], of ``base_dtype``, vocabulary stride 1.
            input_ids: [>= (rows - 1) * query_per_row + 1] int32; row r's anchor
                token at [r * query_per_row], in [0, V).
            query_per_row: tokens per row in ``input_ids``.
            idx_mapping: [rows * steps] int64 request-state row of each row and
                step, < max_reqs (negative: CUDA-graph padding, inert; an index
                >= max_reqs is refused here, and under capture, where values are
                not read, the kernel treats it as padding).
            temperature: [max_reqs] FP32 (0: greedy).
            noise: [rows * steps, V] FP32 Gumbel noise (the rank reads its
                columns) or this rank's columns [rows * steps, V/world].
            logits_cache: [max_reqs, steps, V] of ``cache_dtype``, 16-byte
                aligned; the drafted rows are written in place (full vocabulary).
            draft_tokens: [rows, steps] int64, contiguous; written in place.
            rows: request rows of this launch (default ``base_logits.shape[0]``).

        Returns:
            ``draft_tokens``.

        Every tensor must be on this rank's device. A bad argument raises
        ``ValueError`` (``TypeError`` for a value of the wrong kind) before the
        launch; the values (anchors, request rows) are read outside CUDA-graph
        capture only. Nothing compiles here, so a launch can be captured.
        """
        params = {"query_per_row": query_per_row} if rows is None else {"query_per_row": query_per_row, "rows": rows}
        inputs = dict(base_logits=base_logits, input_ids=input_ids, idx_mapping=idx_mapping, temperature=temperature,
                      noise=noise, logits_cache=logits_cache)
        call = check_call(self.cfg, self.rank, self.device, inputs, params, capturing(), label=argument_label,
                          param_label=argument_label, public=True)
        shape = (call.rows, self.cfg.steps)
        if not isinstance(draft_tokens, torch.Tensor):
            raise TypeError(f"draft_tokens: expected an int64 tensor of shape {shape}, got {_describe(draft_tokens)}")
        if draft_tokens.dtype != torch.int64 or tuple(draft_tokens.shape) != shape \
                or draft_tokens.device != self.device or not draft_tokens.is_contiguous():
            raise ValueError(f"draft_tokens: expected a contiguous int64 tensor of shape {shape} on {self.device}, "
                             f"got {_describe(draft_tokens)}")
        self._enqueue(call, draft_tokens)
        self._launches = (self._launches + 1) & 0xFFFFFFFF
        if not capturing():
            self._flight_launches = (self._flight_launches + 1) & 0xFFFFFFFF
        return draft_tokens

    def _enqueue(self, call: CallArgs, tokens: torch.Tensor) -> None:
        """Launch the kernel for ``call`` on the current stream."""
        import cuda.bindings.driver as cuda
        from cutlass import Int32, Int64

        diag = self.diag_record.address if self.diag_record is not None and self.timeout_ns else 0
        pointers, sizes = kernel_arguments(
            self.cfg, self.rank, self.ctas, call, tokens, self.embed_table, self.head_shard, self.peer.peer_ptrs,
            self.control, diag, self.timeout_ns,
        )
        stream = cuda.CUstream(torch.cuda.current_stream(self.device).cuda_stream)
        with _LAUNCH_LOCK:
            self._kernel(*[Int64(p) for p in pointers], *[Int32(s) for s in sizes], *flight_args(self.flight_recorder),
                         stream)


def kernel_arguments(
    cfg: SamplerConfig, rank: int, ctas: int, call: CallArgs, tokens: torch.Tensor, embed_table: torch.Tensor,
    head_shard: torch.Tensor, peer_ptrs: torch.Tensor, control: torch.Tensor, diag: int, timeout_ns: int,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(20 Int64 values, 7 Int32 values)`` of ``ShardedMarkovSample.__call__`` for one checked call of ``rank``."""
    base, noise, cache = call.base_logits, call.noise, call.logits_cache
    first = rank * cfg.vocab_local
    pointers = (
        base.data_ptr(), base.stride(0), base.stride(1), call.base_column,
        embed_table.data_ptr(), head_shard.data_ptr(), call.input_ids.data_ptr(),
        call.idx_mapping.data_ptr(), call.temperature.data_ptr(),
        noise.data_ptr() + (first if call.noise_column is None else call.noise_column) * noise.element_size(),
        noise.stride(0),
        cache.data_ptr(), cache.stride(0), cache.stride(1), tokens.data_ptr(),
        peer_ptrs.data_ptr(), control.data_ptr(), diag, timeout_ns, cfg.max_reqs,
    )
    sizes = (call.query_per_row, rank, cfg.world, cfg.vocab_local, call.rows, cfg.max_rows, ctas)
    return pointers, sizes


__all__ = [
    "CaptureError",
    "PEER_BUFFER_NAME",
    "ShardedMarkovSampler",
    "compile_variants",
    "compiled_kernel",
    "cooperative_launch",
    "kernel_arguments",
]
