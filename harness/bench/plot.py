"""A PNG of a results document, where matplotlib is importable: per case, the
median per-call time in a CUDA graph and eagerly (p10-p90 as error bars),
beside the graph floor."""

from __future__ import annotations

from typing import Mapping


def plot_results(document: Mapping, path: str) -> str | None:
    """Draw ``document``'s cases into ``path``; return the path, or None without matplotlib or cases."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cases = document["cases"]
    if not cases:
        return None
    labels = [f"{c['family']}/{c['name']}" for c in cases]
    rows = range(len(cases))
    height = 0.27
    fig, ax = plt.subplots(figsize=(9, 1.0 + 0.6 * len(cases)))
    for offset, mode, colour in ((-height, "graph", "tab:blue"), (0.0, "eager", "tab:orange")):
        medians = [c[mode]["median_us"] for c in cases]
        spread = [
            [c[mode]["median_us"] - c[mode]["p10_us"] for c in cases],
            [c[mode]["p90_us"] - c[mode]["median_us"] for c in cases],
        ]
        ax.barh([r + offset for r in rows], medians, height, xerr=spread, label=f"{mode} median", color=colour)
    ax.barh([r + height for r in rows], [c["floor_us"]["graph"] for c in cases], height, label="floor (graph)", color="tab:gray")
    ax.set_yticks(list(rows))
    ax.set_yticklabels(labels)
    ax.set_xscale("log")
    ax.set_xlabel("µs per call")
    ax.set_title(f"{document['device'].get('name', '?')} — {document['date']}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
