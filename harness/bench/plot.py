"""Figures of a results document, one PNG per family, sized to read on a screen (1200 x 700 px).

They draw the rows of ``harness.bench.tables`` (the summary's tables), so a
figure and its table show the same numbers:

- a family of the ``allreduce`` layout (``<stem>.<family>.png``): latency
  against M on log-log axes, one panel per (tp, H), one row of panels per
  source (plain, finalize); LL, BT, the unfused path and the floor as lines, FlashInfer's
  published LL figure as a star where one matches the panel's tp and H, and
  the LL/BT crossover marked (a vertical line where BT stays ahead from
  some M on, a note where it never does).
- decode loops, the ``loop`` layout (``<stem>.<family>.png``): per (rows, steps, ranks) the
  kernel, the eager torch loop and the floor as grouped bars on a log axis,
  each bar labelled with its time and each group with the speedup and the
  distance to the floor.

Families with another layout get no figure (their table says it all).
Without matplotlib nothing is drawn and ``plotting_unavailable`` says why.
"""

from __future__ import annotations

import math
from typing import Mapping

from harness.bench import tables

WIDTH_IN, HEIGHT_IN, DPI = 12.0, 7.0, 100
LINES = (  # (row field, label, colour, marker, line style)
    ("ll", "LL", "tab:blue", "o", "-"),
    ("bt", "BT", "tab:orange", "s", "-"),
    ("unfused", "unfused (torch)", "tab:green", "^", "-"),
    ("best_peer", "fastest peer (torch symm-mem, NCCL)", "tab:brown", "D", "-."),
    ("floor", "floor", "tab:gray", None, "--"),
)
BARS = (("kernel", "kernel", "tab:blue"), ("eager", "eager torch loop", "tab:orange"), ("floor", "floor", "tab:gray"))


def plotting_unavailable() -> str | None:
    """Why no figure can be drawn here (matplotlib missing), or None when it can."""
    try:
        import matplotlib  # noqa: F401, PLC0415 - optional dependency: its presence is the question
    except ImportError as exc:
        return f"matplotlib is not importable ({exc}); install it (the project's dev extra) to get the plots"
    return None


def _pyplot():
    """matplotlib's pyplot on the file-only Agg backend."""
    import matplotlib  # noqa: PLC0415 - optional dependency (the dev extra)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - optional dependency (the dev extra)

    return plt


def _plain_log_ticks(axis) -> None:
    """Label a log ``axis`` at 1, 2 and 5 per decade with plain numbers (10^2 reads worse than 100)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator  # noqa: PLC0415 - optional dependency (the dev extra)

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_locator(NullLocator())


def _title(document: Mapping, what: str) -> str:
    """A figure title: what it shows, on which device, when."""
    return f"{what} — {document['device'].get('name', '?')}, {document['date'][:10]}"


def plot_allreduce(document: Mapping, family: str, path: str) -> str | None:
    """Draw ``family``'s all-reduce latency-against-M panels into ``path``; None when the document has no such rows."""
    rows = tables.allreduce_rows(document, family)
    if not rows:
        return None
    plt = _pyplot()
    shapes = sorted({(r["tp"], r["hidden"]) for r in rows})
    sources = list(dict.fromkeys(r["source"] for r in rows))
    crossovers = tables.crossovers(document, family)
    fig, axes = plt.subplots(len(sources), len(shapes), figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, squeeze=False)
    handles = {}
    for i, source in enumerate(sources):
        for j, (tp, hidden) in enumerate(shapes):
            ax = axes[i][j]
            panel = [r for r in rows if r["source"] == source and (r["tp"], r["hidden"]) == (tp, hidden)]
            if not panel:
                ax.set_axis_off()
                continue
            for field, label, colour, marker, style in LINES:
                points = [(r["rows"], r[field]) for r in panel if r[field] is not None]
                if points:
                    (line,) = ax.plot(*zip(*points), marker=marker, linestyle=style, color=colour, label=label)
                    handles.setdefault(label, line)
            published = [(r["rows"], r["flashinfer"]) for r in panel if r["flashinfer"] is not None]
            if published:
                (star,) = ax.plot(*zip(*published), marker="*", markersize=13, linestyle="none", color="tab:red",
                                  label="FlashInfer LL (published)")
                handles.setdefault(star.get_label(), star)
            measured_m = sorted({r["rows"] for r in panel})
            if (tp, hidden, source) in crossovers:
                _mark_crossover(ax, crossovers[(tp, hidden, source)], measured_m, handles)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xticks(measured_m)
            ax.set_xticklabels([str(m) for m in measured_m])
            ax.minorticks_off()
            _plain_log_ticks(ax.yaxis)
            ax.grid(True, which="major", alpha=0.3)
            ax.set_title(f"tp {tp}, H {hidden}, {source}", fontsize=11)
            ax.set_xlabel("M (rows)")
            if j == 0:
                ax.set_ylabel("µs per call (CUDA-graph median)")
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=len(handles), frameon=False)
    notes = tables.notes(document, family)
    subtitle = "virtual ranks on one GPU, not NVLink" if any("virtual ranks" in n for n in notes) else ""
    fig.suptitle(_title(document, f"{family} latency against M" + (f" ({subtitle})" if subtitle else "")))
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path)
    plt.close(fig)
    return path


def _mark_crossover(ax, found: int | None, measured_m: list[int], handles: dict) -> None:
    """Mark the LL/BT crossover on ``ax``: a line at the M from which BT stays ahead, else a note."""
    if found is None:
        ax.text(0.03, 0.95, "BT never stays ahead: LL only", transform=ax.transAxes, va="top", fontsize=9,
                color="tab:purple")
        return
    line = ax.axvline(found, color="tab:purple", linestyle=":", linewidth=1.5, label="LL/BT crossover")
    handles.setdefault(line.get_label(), line)
    # At the largest M the label goes left of the line, else it would leave the panel.
    at_right = found == measured_m[-1]
    ax.text(found, 0.03, f" BT from M={found} ", transform=ax.get_xaxis_transform(), va="bottom", fontsize=9,
            ha="right" if at_right else "left", color="tab:purple")


def plot_loop(document: Mapping, family: str, path: str) -> str | None:
    """Draw ``family``'s kernel / eager loop / floor grouped bars into ``path``; None when it has no paired rows."""
    rows = tables.loop_rows(document, family)
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI)
    width = 0.8 / len(BARS)
    for k, (field, label, colour) in enumerate(BARS):
        positions = [g + (k - 1) * width for g in range(len(rows))]
        values = [r[field] for r in rows]
        bars = ax.bar(positions, values, width, label=label, color=colour)
        ax.bar_label(bars, labels=[f"{v:.1f}" for v in values], padding=2, fontsize=9)
    ranks_vary = len({r["ranks"] for r in rows}) > 1 or any(r["ranks"] != 1 for r in rows)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([
        f"rows {r['rows']}, steps {r['steps']}" + (f", {_ranks(r)}" if ranks_vary else "")
        + f"\n{r['speedup']:.2f}x faster than eager, {r['x_floor']:.1f}x floor"
        for r in rows
    ])
    ax.set_yscale("log")
    top = max(max(r[field] for field, _, _ in BARS) for r in rows)
    ax.set_ylim(top=10 ** (math.log10(top) + 0.25))
    _plain_log_ticks(ax.yaxis)
    ax.set_ylabel("µs per call (CUDA-graph median)")
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(loc="upper left")
    ax.set_title(_title(document, f"{family}: kernel, eager torch loop and floor"))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _ranks(row: Mapping) -> str:
    """How many ranks a loop row ran on, in words (virtual ranks said so)."""
    return f"{row['ranks']} {'virtual ' if row['virtual'] else ''}rank{'s' if row['ranks'] != 1 else ''}"


def plot_results(document: Mapping, stem: str) -> list[str]:
    """Draw every family that has a figure into ``<stem>.<family>.png``; return the paths ([] without matplotlib)."""
    if plotting_unavailable():
        return []
    paths = []
    for family in tables.families(document):
        layout = tables.layout_of(family)
        path = f"{stem}.{family}.png"
        if layout == "allreduce":
            drawn = plot_allreduce(document, family, path)
        elif layout == "loop":
            drawn = plot_loop(document, family, path)
        else:
            drawn = None
        if drawn:
            paths.append(drawn)
    return paths
