"""The harness's ``markov_sharded`` kernel system: the family's generic interface over ``ShardedMarkovSampler``.

``ShardedMarkovSystem(fabric, static, config, *, diag)`` checks the family's
config (``kernels.markov_sharded.checks.check_config``: unknown
keys are errors, the golden-only ``bias_fn`` and ``rcp_table`` are accepted
and ignored) and builds the public ``kernels.markov_sharded.host.ShardedMarkovSampler``
collectively over the fabric from the static ``embed_table`` and ``head``.
``launch(call_inputs, call_params)`` validates the harness's form of a call
(``call_inputs`` / ``call_params['query_per_row', 'rows', 'steps']``, CPU
tensors copied to the device, errors naming ``call_inputs[...]``), allocates
the draft tokens and calls the public ``__call__`` on the checked tensors,
as a speculator step would; the cache comes back updated in place. The
sampler gets the config's ``timeout_ns`` explicitly (the harness's deadline,
``contracts.markov_sharded.DEFAULT_TIMEOUT_NS`` unless the scenario gives
one), never the public default, which is the serving one (``kernels.diag``).

Importing this module imports CuTe DSL (the adapter imports it lazily).
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from kernels.compile import capturing
from kernels.markov_sharded.host import ShardedMarkovSampler
from kernels.markov_sharded.checks import check_call, check_config

SYSTEM_CLASS = "ShardedMarkovSystem"


class ShardedMarkovSystem:
    """One rank of the ``markov_sharded`` family for the harness: ``launch``/``state`` over the public sampler."""

    def __init__(self, fabric: Any, static: Mapping[str, Any], config: Mapping[str, Any], *, diag: Any = None,
                 flight_recorder: bool = True) -> None:
        for attr in ("rank", "world", "device", "alloc", "barrier"):
            if not hasattr(fabric, attr):
                raise TypeError(f"fabric: expected a kernels.fabric provider (missing {attr!r}), got {type(fabric).__name__}")
        self.cfg = check_config(config, fabric.world)
        cfg = self.cfg
        if not isinstance(static, Mapping):
            raise TypeError(f"static: expected a mapping, got {type(static).__name__}")
        for name in ("embed_table", "head"):
            if name not in static:
                raise ValueError(f"static[{name!r}]: missing")
        self.api = ShardedMarkovSampler(
            static["embed_table"], static["head"], steps=cfg.steps, base_dtype=cfg.base_dtype,
            cache_dtype=cfg.cache_dtype, max_rows=cfg.max_rows, max_reqs=cfg.max_reqs, group=fabric,
            shard_only_base=cfg.shard_only_base, launch_counter_start=cfg.launch_counter_start,
            timeout_ns=cfg.timeout_ns, ctas=cfg.ctas, ranks_per_device=cfg.ranks_per_device, diag=diag,
            flight_recorder=flight_recorder,
        )
        self.rank, self.device = self.api.rank, self.api.device

    def graph_capture_problem(self) -> str | None:
        """None: a launch can be captured (compiled at construction, the launch counter kept on the device)."""
        return None

    def state(self) -> dict:
        """The public sampler's launch counter."""
        return self.api.state()

    def launch(self, call_inputs: Mapping[str, Any], call_params: Mapping[str, Any] | None = None) -> dict:
        """One launch of the chain through the public API: ``{"draft_tokens" int64 [rows, steps], "logits_cache"}``
        (the cache, on the device, updated in place)."""
        call = check_call(self.cfg, self.rank, self.device, call_inputs, call_params, capturing())
        tokens = torch.empty((call.rows, self.cfg.steps), dtype=torch.int64, device=self.device)
        self.api(call.base_logits, call.input_ids, call.query_per_row, call.idx_mapping, call.temperature,
                 call.noise, call.logits_cache, tokens, call.rows)
        return {"draft_tokens": tokens, "logits_cache": call.logits_cache}

    def __getattr__(self, name: str) -> Any:
        """Everything else (``diag_record``, ``ctas``, ``peer``, ...) is the public sampler's."""
        if name == "api":
            raise AttributeError(name)
        return getattr(self.api, name)


__all__ = ["SYSTEM_CLASS", "ShardedMarkovSystem"]
