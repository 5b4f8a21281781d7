"""The argument contract of seed 000's sharded Markov sampler: its limits, config keys and call tensors, and their checks.

One contract for the golden loop (``golden.markov_sharded``), the kernel's
host checks (``kernels.markov_sharded.checks``, which add what the kernel
needs of memory: strides, alignment, device) and the scenario schema
(``scenarios.schema``, which takes the limits and ``vocab_problem``).

Limits: a head row is ``HEAD_DIM`` BF16 values; up to ``MAX_ROWS`` request
rows, ``MAX_STEPS`` draft steps and ``MAX_RANKS`` ranks (the mailbox's
dimensions); the vocabulary is below ``MAX_VOCAB`` (17 index bits of the
candidate key) and every rank's shard a whole number of ``TILE_ROWS``-row
head tiles. The launch counter is a uint32 (``COUNTER_MODULUS``) and a
launch's 15-bit tag ``1 + launches % TAG_PERIOD`` (``launch_tag``).

Every check raises ``ValueError`` (``TypeError`` for a value of the wrong
kind) whose message starts with the argument as the caller spells it
(``config['vocab']``, ``call_inputs['noise']``, or a public argument name:
``label``/``param_label``) and says what was expected. Nothing here reads
a device tensor: value checks take host copies, made by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from contracts.deadlines import MARKOV_SHARDED_CONFIG_TIMEOUT_NS, SERVING_DEADLINE_NS

HEAD_DIM = 256
TILE_ROWS = 16
MAX_ROWS = 8
MAX_STEPS = 8
MAX_RANKS = 8
TAG_BITS = 15
TAG_MASK = (1 << TAG_BITS) - 1
TAG_PERIOD = 32767
INDEX_BITS = 17
INDEX_MASK = (1 << INDEX_BITS) - 1
MAX_VOCAB = 1 << INDEX_BITS
COUNTER_MODULUS = 1 << 32

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
REQUIRED_CONFIG = ("vocab", "world", "steps", "base_dtype", "cache_dtype", "max_rows", "max_reqs")
OPTIONAL_CONFIG = ("shard_only_base", "launch_counter_start", "timeout_ns", "ctas", "ranks_per_device")
# Keys only the golden system reads; accepted so one config drives both.
GOLDEN_ONLY_CONFIG = ("bias_fn", "rcp_table")
CALL_INPUTS = ("input_ids", "idx_mapping", "temperature", "noise", "base_logits", "logits_cache")
CALL_PARAMS = ("query_per_row", "rows", "steps")
# The family config's deadline, which the harness passes to the sampler explicitly (contracts.deadlines).
DEFAULT_TIMEOUT_NS = MARKOV_SHARDED_CONFIG_TIMEOUT_NS

Label = Callable[[str], str]


def launch_tag(launches: int) -> int:
    """The 15-bit mailbox tag of a launch counter value (never 0, so 0 means "not posted")."""
    return 1 + launches % TAG_PERIOD


def key_index(key: int) -> int:
    """The global vocabulary index a candidate key carries."""
    return INDEX_MASK - (key & INDEX_MASK)


def input_label(name: str) -> str:
    """How an error names call input ``name``: ``call_inputs['<name>']``."""
    return f"call_inputs[{name!r}]"


def param_label(name: str) -> str:
    """How an error names call parameter ``name``: ``call_params['<name>']``."""
    return f"call_params[{name!r}]"


@dataclass(frozen=True)
class SamplerConfig:
    """A validated configuration (dtypes by name: ``DTYPES`` gives the torch dtype)."""

    vocab: int
    world: int
    steps: int
    base_dtype: str
    cache_dtype: str
    max_rows: int
    max_reqs: int
    shard_only_base: bool
    launch_counter_start: int
    timeout_ns: int
    ctas: int | None
    ranks_per_device: int | None

    @property
    def vocab_local(self) -> int:
        """Vocabulary entries per rank."""
        return self.vocab // self.world

    @property
    def cache_bytes(self) -> int:
        """Bytes of one cache element (the kernel's stores and peer buffers are sized by it)."""
        return DTYPES[self.cache_dtype].itemsize


def check_int(where: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``, else an error naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where}: expected an int, got {type(value).__name__} {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{where}: expected an int in {bound}, got {value}")
    return value


def check_mapping(where: str, value: Any) -> Mapping:
    """``value`` if it is a mapping, else a ``TypeError`` naming ``where``."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def dtype_name(where: str, value: Any) -> str:
    """The dtype name (``bfloat16`` or ``float32``) a config entry gives as a name or a torch dtype."""
    for name, dtype in DTYPES.items():
        if value == name or value is dtype:
            return name
    raise ValueError(f"{where}: expected 'bfloat16' or 'float32', got {value!r}")


def vocab_problem(vocab: int, world: int) -> str | None:
    """Why ``vocab`` cannot be sharded over ``world`` ranks (None: it can)."""
    if vocab % (TILE_ROWS * world):
        return (f"{vocab} must be divisible by 16 * world = {TILE_ROWS * world} "
                "(one 16-row head tile per warp)")
    return None


def _check_keys(config: Mapping, require_world: bool) -> None:
    """Every required key there (``world`` only with ``require_world``), none unknown."""
    required = REQUIRED_CONFIG if require_world else tuple(k for k in REQUIRED_CONFIG if k != "world")
    missing = [k for k in required if k not in config]
    if missing:
        raise ValueError(f"config[{missing[0]!r}]: missing (required: {', '.join(required)})")
    unknown = sorted(set(config) - set(REQUIRED_CONFIG) - set(OPTIONAL_CONFIG) - set(GOLDEN_ONLY_CONFIG))
    if unknown:
        raise ValueError(f"config[{unknown[0]!r}]: unknown key (known: {', '.join(REQUIRED_CONFIG + OPTIONAL_CONFIG)})")


def constructor(
    embed_table: torch.Tensor,
    head: torch.Tensor,
    *,
    steps: int,
    base_dtype: str | torch.dtype = "bfloat16",
    cache_dtype: str | torch.dtype = "bfloat16",
    max_rows: int = MAX_ROWS,
    max_reqs: int,
    group: Any = None,
    device: torch.device | str | None = None,
    shard_only_base: bool = False,
    launch_counter_start: int = 0,
    timeout_ns: int = SERVING_DEADLINE_NS,
    ctas: int | None = None,
    ranks_per_device: int | None = None,
    diag: Any = None,
    stamps: bool = False,
    flight_recorder: bool = True,
    flight_dir: Any = None,
) -> dict[str, Any]:
    """The public constructor's arguments by name (``ShardedMarkovSampler`` and its golden stand-in take this
    signature, ``contracts.constructor.takes``)."""
    return dict(locals())


def public_options(arguments: Mapping[str, Any], vocab: int, world: int) -> dict[str, Any]:
    """The configuration the public constructor's ``arguments`` (by name: every key's own) give for a ``vocab``-row
    table over ``world`` ranks, the optional keys left unset (None) left out."""
    options = {key: arguments.get(key) for key in REQUIRED_CONFIG + OPTIONAL_CONFIG}
    options.update(vocab=vocab, world=world)
    return {key: value for key, value in options.items() if value is not None}


def check_config(config: Any, world: int, *, world_source: str = "fabric", require_world: bool = True) -> SamplerConfig:
    """The validated configuration of a rank of a ``world``-rank ``world_source`` (the fabric, the comm)."""
    check_mapping("config", config)
    _check_keys(config, require_world)
    cfg_world = check_int("config['world']", config.get("world", world), 1, MAX_RANKS)
    if cfg_world != world:
        raise ValueError(f"config['world']: expected the {world_source}'s world {world}, got {cfg_world}")
    vocab = check_int("config['vocab']", config["vocab"], 1, MAX_VOCAB)
    problem = vocab_problem(vocab, world)
    if problem:
        raise ValueError(f"config['vocab']: {problem}")
    shard_only = config.get("shard_only_base", False)
    if not isinstance(shard_only, bool):
        raise TypeError(f"config['shard_only_base']: expected a bool, got {shard_only!r}")
    ctas, ranks_per_device = config.get("ctas"), config.get("ranks_per_device")
    return SamplerConfig(
        vocab=vocab,
        world=world,
        steps=check_int("config['steps']", config["steps"], 1, MAX_STEPS),
        base_dtype=dtype_name("config['base_dtype']", config["base_dtype"]),
        cache_dtype=dtype_name("config['cache_dtype']", config["cache_dtype"]),
        max_rows=check_int("config['max_rows']", config["max_rows"], 1, MAX_ROWS),
        max_reqs=check_int("config['max_reqs']", config["max_reqs"], 1),
        shard_only_base=shard_only,
        launch_counter_start=check_int(
            "config['launch_counter_start']", config.get("launch_counter_start", 0), 0, COUNTER_MODULUS - 1
        ),
        timeout_ns=check_int("config['timeout_ns']", config.get("timeout_ns", DEFAULT_TIMEOUT_NS), 0, (1 << 63) - 1),
        ctas=None if ctas is None else check_int("config['ctas']", ctas, 1),
        ranks_per_device=None if ranks_per_device is None else check_int(
            "config['ranks_per_device']", ranks_per_device, 1, world),
    )


@dataclass(frozen=True)
class TensorSpec:
    """What one tensor argument must be: its dtype and one of its shapes."""

    dtype: torch.dtype
    shapes: tuple[tuple[int, ...], ...]


def static_spec(cfg: SamplerConfig) -> TensorSpec:
    """``embed_table`` and ``head``: the full BF16 ``[V, 256]``."""
    return TensorSpec(torch.bfloat16, ((cfg.vocab, HEAD_DIM),))


def call_specs(cfg: SamplerConfig, rows: int, *, local_base: bool, local_noise: bool) -> dict[str, TensorSpec]:
    """The call tensors but ``input_ids``, in checking order; ``local_base``/``local_noise``: also ``[..., V/world]``."""
    steps, vocab, local = cfg.steps, cfg.vocab, cfg.vocab_local
    base_shapes = ((rows, steps, vocab),) + (((rows, steps, local),) if local_base else ())
    noise_shapes = ((rows * steps, vocab),) + (((rows * steps, local),) if local_noise else ())
    return {
        "base_logits": TensorSpec(DTYPES[cfg.base_dtype], base_shapes),
        "idx_mapping": TensorSpec(torch.int64, ((rows * steps,),)),
        "temperature": TensorSpec(torch.float32, ((cfg.max_reqs,),)),
        "noise": TensorSpec(torch.float32, noise_shapes),
        "logits_cache": TensorSpec(DTYPES[cfg.cache_dtype], ((cfg.max_reqs, steps, vocab),)),
    }


def check_tensor(where: str, value: Any, spec: TensorSpec) -> torch.Tensor:
    """``value`` if it is a tensor of ``spec``'s dtype and one of its shapes, else an error naming ``where``."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{where}: expected a {spec.dtype} tensor of shape {spec.shapes[0]}, got {type(value).__name__}")
    if value.dtype != spec.dtype:
        raise ValueError(f"{where}: expected dtype {spec.dtype}, got {value.dtype}")
    if tuple(value.shape) not in spec.shapes:
        expected = " or ".join(str(s) for s in spec.shapes)
        raise ValueError(f"{where}: expected shape {expected}, got {tuple(value.shape)}")
    return value


def check_params(cfg: SamplerConfig, call_params: Any, base: Any, label: Label = input_label,
                 param_label: Label = param_label) -> tuple[int, int]:
    """``(rows, query_per_row)`` of one call's parameters (``rows`` defaults to ``base``'s first dimension)."""
    params = {} if call_params is None else check_mapping("call_params", call_params)
    unknown = sorted(set(params) - set(CALL_PARAMS))
    if unknown:
        raise ValueError(f"{param_label(unknown[0])}: unknown parameter (known: {', '.join(CALL_PARAMS)})")
    if "query_per_row" not in params:
        raise ValueError(f"{param_label('query_per_row')}: missing")
    query_per_row = check_int(param_label("query_per_row"), params["query_per_row"], 1)
    if "steps" in params and params["steps"] != cfg.steps:
        raise ValueError(f"{param_label('steps')}: built for config steps {cfg.steps}, got {params['steps']!r}")
    if not isinstance(base, torch.Tensor) or base.dim() != 3:
        got = tuple(base.shape) if isinstance(base, torch.Tensor) else type(base).__name__
        raise ValueError(f"{label('base_logits')}: expected a 3-d [rows, steps, vocab] tensor, got {got}")
    rows = check_int(param_label("rows"), params.get("rows", base.shape[0]), 1, cfg.max_rows)
    return rows, query_per_row


def check_input_ids(ids: Any, rows: int, query_per_row: int, label: Label = input_label) -> TensorSpec:
    """The spec ``input_ids`` meets: a 1-d int32 tensor holding every row's anchor."""
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int32 or ids.dim() != 1:
        got = f"{ids.dtype} of shape {tuple(ids.shape)}" if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"{label('input_ids')}: expected a 1-d int32 tensor, got {got}")
    needed = (rows - 1) * query_per_row + 1
    if ids.shape[0] < needed:
        raise ValueError(
            f"{label('input_ids')}: {rows} rows at query_per_row {query_per_row} need "
            f"at least {needed} ids, got {ids.shape[0]}"
        )
    return TensorSpec(torch.int32, ((ids.shape[0],),))


def check_requests(cfg: SamplerConfig, rows: int, query_per_row: int, ids: torch.Tensor, idx: torch.Tensor,
                   label: Label = input_label) -> tuple[torch.Tensor, torch.Tensor]:
    """``(anchors [rows] int64, states [rows, steps])`` of host ``input_ids`` and ``idx_mapping``, checked:
    anchors inside the vocabulary, request rows below max_reqs, no request twice in one step."""
    anchors = ids[: (rows - 1) * query_per_row + 1 : query_per_row].to(torch.int64)
    bad = ((anchors < 0) | (anchors >= cfg.vocab)).nonzero().flatten().tolist()
    if bad:
        raise ValueError(
            f"{label('input_ids')}: anchor of row {bad[0]} is {int(anchors[bad[0]])}, "
            f"expected a token id in [0, {cfg.vocab})"
        )
    states = idx.view(rows, cfg.steps)
    over = (states >= cfg.max_reqs).nonzero()
    if len(over):
        r, i = over[0].tolist()
        raise ValueError(
            f"{label('idx_mapping')}: row {r} step {i} maps to request {int(states[r, i])}, "
            f"expected < max_reqs {cfg.max_reqs} (or negative for padding)"
        )
    for step in range(cfg.steps):
        used = [s for s in states[:, step].tolist() if s >= 0]
        if len(used) != len(set(used)):
            raise ValueError(
                f"{label('idx_mapping')}: step {step} maps two rows to one request "
                f"({states[:, step].tolist()}); their cache writes would race"
            )
    return anchors, states


__all__ = [name for name in dir() if name.isupper()] + [
    "SamplerConfig", "TensorSpec", "call_specs", "check_config", "check_input_ids", "check_int", "check_mapping",
    "check_params", "check_requests", "check_tensor", "dtype_name", "input_label", "key_index", "launch_tag",
    "param_label", "public_options", "static_spec", "vocab_problem",
]
