"""A test-only markov_sharded system wrong in every launch, for the verdicts-under-fire test.

``EveryLaunchWrong`` is the golden sharded system except that draft token
[0, 0] of every launch is off by one: any scenario at any world fails with
mismatching elements. It is selected only through
``$RANKCHECK_TEST_PLANTED_SYSTEM`` (``harness.families.systems``), which
only tests set.
"""

from __future__ import annotations

from golden.markov_sharded import GoldenMarkovSharded

PLANTED_WRONG = "markov_sharded=tests.harness.planted_wrong:EveryLaunchWrong"


class EveryLaunchWrong(GoldenMarkovSharded):
    """The golden system with draft token [0, 0] of every launch moved by one."""

    def launch(self, call_inputs, call_params):
        """The golden launch, then the planted corruption."""
        out = dict(super().launch(call_inputs, call_params))
        out["draft_tokens"] = out["draft_tokens"].clone()
        out["draft_tokens"][0, 0] = (out["draft_tokens"][0, 0] + 1) % self.vocab
        return out
