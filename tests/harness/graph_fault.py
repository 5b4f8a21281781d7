"""A test-only markov_sharded system whose every call returns one wrong draft token (``WrongFirstToken``).

Selected only through ``$RANKCHECK_TEST_PLANTED_SYSTEM`` (``PLANTED``), so a
graph case on the cpu launcher can be shown to fail on wrong bits rather than
be excused as not available.
"""

from __future__ import annotations

from golden.markov_sharded import GoldenMarkovSharded

PLANTED = "markov_sharded=tests.harness.graph_fault:WrongFirstToken"


class WrongFirstToken(GoldenMarkovSharded):
    """The golden system, with draft token [0, 0] one higher than the golden's on every call."""

    def launch(self, call_inputs, call_params):
        """The golden launch, then token [0, 0] changed."""
        out = dict(super().launch(call_inputs, call_params))
        out["draft_tokens"] = out["draft_tokens"].clone()
        out["draft_tokens"][0, 0] += 1
        return out
