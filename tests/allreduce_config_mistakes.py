"""The all-reduce config mistakes that the golden system and the kernels' ``check_config`` each refuse by name.

One row a mistake, the golden's case beside the kernels' (they check the same keys), so that a check one side
gains shows where the other lacks it; tests/golden/test_golden_allreduce.py and tests/kernels/test_allreduce.py
take their column each.
"""

import pytest

# (mistake, golden: (change to make_config(1), message regex), kernel: (change to _config(), message text));
# None where that side has no such case.
CONFIG_MISTAKES = [
    ("hidden", ({"hidden": 204}, "multiple of 8"), ({"hidden": 1004}, "config.hidden")),
    ("quantize_with_residual_only", ({"residual_only": True}, "exclude each other"),
     ({"quantize": True, "residual_only": True}, "exclude")),
    ("quantized_hidden", ({"hidden": 264}, "multiple of 128"), ({"quantize": True, "hidden": 1064}, "multiple of 128")),
    ("hc", None, ({"hc": 9}, "config.hc")),
    ("eps", ({"eps": float("nan")}, "config.eps"), ({"eps": float("nan")}, "config.eps")),
    ("tp", ({"tp": 0}, "config.tp"), None),
    ("top_k", None, ({"top_k": 0}, "config.top_k")),
    ("unknown_key", ({"surprise": 1}, "unknown keys"), ({"unknown": 1}, "unknown keys")),
    ("start_generation", ({"start_generation": 3}, "start_generation"),
     ({"start_generation": 3}, "config.start_generation")),
    ("norm_threads", ({"norm_threads": 48}, "threads"), ({"norm_threads": 100}, "config.norm_threads")),
]


def config_mistakes(side: str) -> list:
    """``pytest.param(change, message, id=mistake)`` for every mistake ``side`` ("golden" or "kernel") has a case of."""
    column = {"golden": 1, "kernel": 2}[side]
    return [pytest.param(*row[column], id=row[0]) for row in CONFIG_MISTAKES if row[column] is not None]
