"""A test-only allreduce_mhc system that runs LL for every call: the same bits as BT, the wrong protocol.

``AlwaysLL`` is the golden system with every call's ``protocol`` forced to
``ll`` (LL and BT give the same bits, so only the protocol check can tell);
it is selected only through ``$RANKCHECK_TEST_PLANTED_SYSTEM``
(``harness.families.planted_system``), which only tests set.
"""

from __future__ import annotations

from golden.allreduce_mhc import GoldenAllReduceMHC

PLANTED = "allreduce_mhc=tests.harness.planted_protocol:AlwaysLL"


class AlwaysLL(GoldenAllReduceMHC):
    """The golden system, running LL whatever the call's protocol or row count implies."""

    def launch(self, call_inputs, call_params=None):
        """The golden launch with the protocol forced to LL."""
        return super().launch(call_inputs, {**dict(call_params or {}), "protocol": "ll"})
