"""What golden/ and kernels/ both need, written once: the families' argument contracts and the in-process rendezvous.

This package is a leaf: it imports torch and the standard library only, so
``golden/`` (independent truth) and ``kernels/`` (which imports none of the
other packages) may both import it, and so may ``scenarios/`` and
``harness/``. One module per kernel family, named after it
(``contracts/<family>.py``), holds what that family's kernel and golden
share: its limits, config keys, call tensor specifications and the checks
that apply them, the public constructor's signature (``constructor``, taken
by both sides through ``contracts.constructor``), or only the rules both
sides need (the fused step's ``base`` forms); ``contracts.rendezvous`` is the slot-table meeting
point of in-process ranks and their thread runner; ``contracts.wire_header`` packs a JSON header
into a fixed-size byte tensor for a collective; ``contracts.deadlines`` holds every deadline's
default (the public classes' serving deadline, the harness's and the bench's kernel deadlines, the harness's
wall-clock allowances and how the load scales them), written once for all four packages.
"""
