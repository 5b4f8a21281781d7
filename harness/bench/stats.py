"""Summary statistics of timing samples (pure Python, no GPU).

A benchmark reports the median of many timed repetitions; the spread is
given by the 10th and 90th percentiles, computed by linear interpolation
between closest ranks (numpy's default ``linear`` method), so results are
comparable with numpy-based tools.
"""

from __future__ import annotations

import math
from typing import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``samples`` by linear interpolation between closest ranks."""
    if not samples:
        raise ValueError("percentile: samples must be non-empty")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile: q must be in [0, 100], got {q}")
    ordered = sorted(float(s) for s in samples)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(samples_us: Sequence[float]) -> dict:
    """Count, median, p10, p90, min, max, mean and sample standard deviation of ``samples_us`` (µs)."""
    if not samples_us:
        raise ValueError("summarize: samples must be non-empty")
    values = [float(s) for s in samples_us]
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise ValueError("summarize: samples must be finite and non-negative")
    mean = sum(values) / len(values)
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return {
        "n": len(values),
        "median_us": percentile(values, 50.0),
        "p10_us": percentile(values, 10.0),
        "p90_us": percentile(values, 90.0),
        "min_us": min(values),
        "max_us": max(values),
        "mean_us": mean,
        "stdev_us": math.sqrt(variance),
    }
