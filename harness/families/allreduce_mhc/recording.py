"""The all-reduce's public class as a recording sees it (``harness.recording.targets`` gathers it).

``AllReduceMHC``: every rank passes the replicated mHC state (the residual,
the mixing matrices, the norm weight) with the same bits to ``__call__``
and ``finalize``, and ``finalize`` the same expert weights too; a rank's own
contribution differs by rank and is compared by shape and dtype only.
"""

from __future__ import annotations

from harness.recording.public_class import MethodFacts, PublicClass

_REPLICATED_MHC = ("residual", "post", "comb", "pre", "norm_weight")
PUBLIC_CLASSES = (
    PublicClass("AllReduceMHC", "kernels.allreduce_mhc", {
        "__call__": MethodFacts(agreed=_REPLICATED_MHC),
        "finalize": MethodFacts(agreed=("expert_weights", *_REPLICATED_MHC)),
    }),
)
