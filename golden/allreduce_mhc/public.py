"""Golden stand-in of ``kernels.allreduce_mhc.AllReduceMHC`` (seed 004): the public class, computed by ``golden.allreduce_mhc``.

``AllReduceMHC`` here takes the kernel class's constructor keywords and
methods (``__call__``, ``finalize``, ``state``) with the same names,
defaults, return values and in-place writes, and gives the same bits: each
call is one ``launch`` of the golden system ``golden.allreduce_mhc.GoldenAllReduceMHC``
over ``group`` (a ``golden.comm.Comm``), whose arithmetic is the family's
contract (sanitize, rank-order FP32 sum, mHC post-mix and collapse
``golden/allreduce_mhc/mhc.py``, RMSNorm ``golden/allreduce_mhc/rmsnorm.py``, MXFP8 ``golden/allreduce_mhc/mxfp8.py``,
MoE finalize ``golden/allreduce_mhc/moe.py``).

From the public call to the golden's form. The public call gives this
rank's contribution; the golden system's call form is ``[tp, ...]`` with
rank k's at index k, of which a rank reads only its own (the others arrive
through ``Comm.all_gather``), so this rank's tensor is expanded (a view,
no copy) over the ``tp`` slots. What the kernel takes per call and the
golden per system (``norm_eps``, ``norm_weight``, and which outputs: the
residual streams only for ``pre=None``, MXFP8 for a given ``mxfp8_out``)
is set on the golden system's config and static weights before its launch;
its generation pairs and call count carry over from call to call, so
``state()`` is the golden system's (``calls``, both protocols' ``(NEXT,
ACTIVE)``), as the kernel's.

Protocol. LL below ``bt_min_rows`` rows (finalize: ``bt_min_finalize_rows``),
BT from there when ``max_num_tokens`` reaches it, ``protocol`` forcing one,
as the kernel picks. Without ``bt_min_rows`` the kernel resolves a
threshold per GPU and fabric (the bench's measurement, the user cache's over
the shipped ``kernels/allreduce_mhc/thresholds.json``, else the seed's preset)
that the golden cannot know: the stand-in then runs LL only. A kernel
instance's ``public_args`` carries its resolved thresholds, so a stand-in
rebuilt from them picks as it did. The bits never depend on
the protocol; the launch count does.

Flight launches (``flight_launches``): the kernel numbers every launch of
the instance (``kernels.flight``, record word 0): an LL call launches
publish and consumer (2), a BT call publish, owner reduce and consumer (3).
The stand-in counts them alike, from 0; it keeps no ring
(``flight_recorder`` is None whatever the flag).

Not modelled: deadlines (``timeout_ms`` is checked as the kernel checks it,
then ignored: a missing peer ends in ``golden.comm.CollectiveTimeout``, not
a ``kernels.diag`` record), fan-out, grids and memory (device, contiguity,
alignment are not checked; tensors live on the CPU; ``device`` must be None
or a CPU device). Argument errors are the family contract's
(``contracts.allreduce_mhc``, as the kernel's host checks), raised before
anything changes and naming the public argument.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from contracts import allreduce_mhc as contract
from contracts.constructor import public_args, takes
from golden.allreduce_mhc import GoldenAllReduceMHC, check_static, uses_bt
from golden.public.common import (
    LaunchCount,
    argument_names,
    check_device,
    check_flag,
    comm_of,
)
from golden.allreduce_mhc.rmsnorm import NormLayout

# Kernel launches of one call, per protocol (publish, [owner reduce,] consumer).
LAUNCHES = {"ll": 2, "bt": 3}


def _argument_name(key: str) -> str:
    """How the public call's errors name argument ``key``: by its name."""
    return key


class AllReduceMHC:
    """Golden stand-in of ``kernels.allreduce_mhc.AllReduceMHC``: same constructor, ``__call__``, ``finalize``, ``state``.

    ``group``: a ``golden.comm.Comm`` of ``tp`` ranks (None: world 1);
    ``device``: None or a CPU device. Every other argument is the kernel
    class's (module docstring: what is and is not modelled).
    """

    # The caller's buffers each method writes in place, bit for bit as the kernel (besides what it returns).
    WRITES = {"__call__": ("mxfp8_out",), "finalize": ("mxfp8_out",)}
    # Buffers the kernel writes with values the stand-in does not model (none here).
    SCRATCH: dict[str, tuple[str, ...]] = {}

    @takes(contract.constructor)
    def __init__(self, arguments: dict[str, Any]) -> None:
        self.public_args = public_args(arguments)
        check_device(arguments["device"])
        check_flag("flight_recorder", arguments["flight_recorder"])
        comm = comm_of(arguments["group"])
        options = contract.public_options(arguments, comm.world)
        self.config = contract.check_config(options, contract.public_label, layout=NormLayout)
        self.rank, self.tp = comm.rank, comm.world
        # Built for residual streams only (no weight yet); each call sets its own outputs, epsilon and weight.
        self._golden = GoldenAllReduceMHC(comm, {}, {**options, "quantize": False, "residual_only": True})
        self._launches = LaunchCount()
        self.flight_recorder = None
        self.timeout_ms = arguments["timeout_ms"]

    @property
    def bt_enabled(self) -> bool:
        """Whether this instance has BT at all (``max_num_tokens >= bt_min_rows``, the latter given)."""
        return self.config.bt_enabled

    @property
    def flight_launches(self) -> int:
        """Kernel launches so far as the kernel's flight recorder numbers them (2 per LL call, 3 per BT call)."""
        return self._launches.value

    def state(self) -> dict[str, int]:
        """``calls`` and both protocols' ``(NEXT, ACTIVE)`` generations, as the kernel's ``state()``."""
        return self._golden.state()

    def __call__(self, x, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out=None, *, protocol="auto"):
        """Return (post-mixed residual streams, normalized layer input) of ``x`` all-reduced over the group.

        The arguments are the kernel's (``kernels.allreduce_mhc.AllReduceMHC.__call__``);
        ``mxfp8_out`` is written in place; the outputs are new tensors.
        """
        return self._launch({"x": x}, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out, protocol)

    def finalize(self, gemm2_permuted, expert_weights, expanded_idx_to_permuted_idx, shared_output, residual, post,
                 comb, pre, norm_weight, norm_eps, mxfp8_out=None, *, protocol="auto"):
        """``__call__`` for a MoE output left unfinalized (the kernel's ``finalize``)."""
        sources = dict(gemm2_permuted=gemm2_permuted, expert_weights=expert_weights,
                       expanded_idx_to_permuted_idx=expanded_idx_to_permuted_idx, shared_output=shared_output)
        return self._launch(sources, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out, protocol)

    def _check(self, sources, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out, protocol):
        """``(rows, finalize, output kind, eps, mxfp8_out as bytes)`` of a public call, every argument checked as the
        kernel's host does."""
        cfg = self.config
        contract.check_protocol(protocol, "protocol")
        rows = contract.check_rows(cfg, residual, "residual", "max_num_tokens")
        mixes = {"residual": residual, "post": contract.post_as_matrix(post, rows, cfg.hc), "comb": comb}
        contract.check_tensors(mixes, contract.mix_specs(cfg, rows, False), _argument_name, TypeError)
        output, mxfp8_out = contract.check_output(cfg, rows, pre, norm_weight, mxfp8_out)
        eps = contract.check_eps(norm_eps, "norm_eps")
        finalize = "x" not in sources
        routed = contract.routed_rows(cfg, sources.get("gemm2_permuted"), "gemm2_permuted", True) if finalize else None
        got = contract.check_tensors(sources, contract.source_specs(cfg, rows, finalize, routed, True),
                                     _argument_name, TypeError)
        if finalize:
            contract.check_routes(got["expanded_idx_to_permuted_idx"], routed, "expanded_idx_to_permuted_idx")
        if protocol == "bt" and not cfg.bt_enabled:
            raise ValueError(
                f"protocol 'bt' needs max_num_tokens ({cfg.capacity}) >= the BT row threshold "
                f"({'not given' if cfg.bt_min_rows is None else cfg.bt_min_rows}): this instance has no BT mailboxes"
            )
        return rows, finalize, output, eps, mxfp8_out

    def _launch(self, sources, residual, post, comb, pre, norm_weight, norm_eps, mxfp8_out, protocol):
        """One call through the golden system; writes ``mxfp8_out`` and counts the call's launches."""
        rows, finalize, output, eps, mxfp8_out = self._check(sources, residual, post, comb, pre, norm_weight,
                                                             norm_eps, mxfp8_out, protocol)
        config = dataclasses.replace(self.config, eps=eps, residual_only=output == "residual",
                                     quantize=output == "mxfp8")
        call_inputs = {"residual": residual, "post": post, "comb": comb}
        if pre is not None:
            call_inputs["pre"] = pre
        for name, tensor in sources.items():
            # The golden's [tp, ...] form: this rank reads only its own slot.
            call_inputs[name] = tensor if name == "expert_weights" else tensor.unsqueeze(0).expand(self.tp, *tensor.shape)
        self._golden.config = config
        self._golden.static = check_static({} if norm_weight is None else {"norm_weight": norm_weight}, config)
        bt = uses_bt(config, SimpleNamespace(protocol=protocol, finalize=finalize, rows=rows))
        with argument_names():
            outputs = self._golden.launch(call_inputs, {"finalize": finalize, "protocol": protocol})
        self._launches.add(LAUNCHES["bt" if bt else "ll"])
        if output == "mxfp8":
            mxfp8_out[0].copy_(outputs["mxfp8_values"])
            mxfp8_out[1].copy_(outputs["mxfp8_scales"])
        return outputs["residual_out"], outputs.get("layer_input")


# The kernel class (by module and name) this module stands in for; ``golden.public`` merges every family's.
STAND_INS = {"kernels.allreduce_mhc.host.AllReduceMHC": AllReduceMHC}

__all__ = ["AllReduceMHC", "LAUNCHES", "STAND_INS"]
