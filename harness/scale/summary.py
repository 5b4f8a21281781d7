"""The scale run as a table and a plot: one row per world, from one or more ``scale.json`` files.

The batch job (the cases that cannot hang, several to a job) gives the
start-up and per-case costs; the job with the planted hang gives how soon
the bad group was named and how long the healthy nodes waited for the bad
one. Worlds measured on different machines (2 cores here, 16 on the GPU
machine) keep their host and core count in the row, so the table never
passes one machine's numbers for another's. The plot needs matplotlib; when
it is missing the table is still written and the plot's absence is said.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

COLUMNS = (
    ("world", "world"), ("shape", "agents x procs, tp"), ("host", "host (cores)"),
    ("rendezvous_s", "rendezvous s"), ("import_s", "torch import s"), ("setup_s", "setup s"),
    ("overhead_s", "per-case overhead s (median)"), ("verdict_latency_s", "verdict latency s"),
    ("teardown_s", "teardown s"), ("hang_named_after_s", "hang named after s"), ("linger_s", "others waited s"),
    ("wall_s", "wall s"), ("rank_hwm_max_mib", "rank VmHWM MiB (max)"), ("groups", "groups pass / failing"),
    ("left", "processes left"),
)


def _num(value, digits: int = 1) -> str:
    """A number for the table ('-' when absent)."""
    return "-" if value is None else f"{value:.{digits}f}"


def _median(spread: dict | None):
    """The median of a ``{median, max}`` spread (None when absent)."""
    return (spread or {}).get("median")


def world_row(world: dict, host: dict) -> dict:
    """One table row of a measured world: the batch job's start-up and per-case costs, the hang job's, and the totals."""
    jobs = world["jobs"]
    hang_jobs = [j for j in jobs if "hang_named_after_s" in j]
    batch = next((j for j in jobs if "hang_named_after_s" not in j and j.get("rendezvous_s") is not None),
                 jobs[0] if jobs else {})
    hang = hang_jobs[0] if hang_jobs else {}
    shape, verdicts = world["shape"], world["verdicts"]
    return {"world": world["world"], "shape": f"{shape['nodes']} x {shape['per_node']}, tp {shape['tp']}",
            "host": f"{host.get('host', '?')} ({host.get('cores', '?')})",
            "rendezvous_s": batch.get("rendezvous_s"), "import_s": batch.get("import_s"),
            "setup_s": batch.get("setup_s"), "overhead_s": _median(batch.get("overhead_s")),
            "verdict_latency_s": _median(batch.get("verdict_latency_s")),
            "teardown_s": _median(batch.get("teardown_s")), "hang_named_after_s": hang.get("hang_named_after_s"),
            "linger_s": (hang.get("linger_s") or {}).get("max"), "wall_s": world.get("wall_s"),
            "rank_hwm_max_mib": world["memory"].get("rank_hwm_max_mib"),
            "groups": f"{verdicts.get('groups_all_pass', '?')} / {len(verdicts.get('groups_failing', []))}",
            "left": len(world.get("processes_left", [])) + len(world["agents"].get("leftovers", []))}


def rows_of(docs: Sequence[dict]) -> list[dict]:
    """Every measured world of every result document as a row, by world (a later document's world replaces an earlier's)."""
    rows: dict[int, dict] = {}
    for doc in docs:
        for world in doc["worlds"]:
            if world.get("skipped"):
                continue
            rows[world["world"]] = world_row(world, doc.get("host", {}))
    return [rows[w] for w in sorted(rows)]


def markdown(rows: Sequence[dict], notes: Sequence[str] = ()) -> str:
    """The table as markdown, with the notes (what was run, how) under it."""
    head = "| " + " | ".join(title for _, title in COLUMNS) + " |"
    rule = "| " + " | ".join("---" for _ in COLUMNS) + " |"
    lines = [head, rule]
    for row in rows:
        cells = [row[key] if isinstance(row[key], str) or key in ("world", "left") else _num(row[key])
                 for key, _ in COLUMNS]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(["# The nightly shape at scale (cpu launcher, one host)", "", *lines, "", *notes]) + "\n"


PLOTTED = (("rendezvous_s", "rendezvous"), ("setup_s", "setup"), ("overhead_s", "per-case overhead"),
           ("teardown_s", "teardown"), ("hang_named_after_s", "hang named after"))


def plot(rows: Sequence[dict], path: Path) -> str:
    """Seconds per cost and memory per rank against the world, into ``path``; return what was written, in words."""
    try:
        import matplotlib  # noqa: PLC0415 - optional dependency (the dev extra)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415 - optional dependency (the dev extra)
    except ImportError as exc:
        return f"no plot: matplotlib is not importable ({exc}); `python -m harness.scale summary` redraws it"
    worlds = [r["world"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in PLOTTED:
        left.plot(worlds, [r[key] if r[key] is not None else float("nan") for r in rows], marker="o", label=label)
    left.set_xlabel("world (ranks)")
    left.set_ylabel("seconds")
    left.set_xscale("log", base=2)
    left.legend(fontsize=8)
    left.set_title("costs of the nightly shape")
    right.plot(worlds, [r["rank_hwm_max_mib"] or float("nan") for r in rows], marker="o")
    right.set_xlabel("world (ranks)")
    right.set_ylabel("MiB")
    right.set_xscale("log", base=2)
    right.set_title("VmHWM per rank (max)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"plot {path}"


def write_summary(docs: Sequence[dict], out: Path, notes: Sequence[str] = ()) -> list[str]:
    """Write ``scale.md`` and ``scale.png`` under ``out`` from the result documents; return what was written."""
    rows = rows_of(docs)
    out.mkdir(parents=True, exist_ok=True)
    hosts = [f"{d.get('host', {}).get('host', '?')}: {d.get('host', {}).get('cores', '?')} cores, "
             f"command `{d.get('command', '?')}`" for d in docs]
    (out / "scale.md").write_text(markdown(rows, list(notes) + [f"- measured on {h}" for h in hosts]),
                                  encoding="utf-8")
    return [f"table {out / 'scale.md'}", plot(rows, out / "scale.png")]


def load_results(paths: Sequence[str | Path]) -> list[dict]:
    """The result documents (``scale.json``) at ``paths``."""
    return [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]


__all__ = ["COLUMNS", "load_results", "markdown", "plot", "rows_of", "world_row", "write_summary"]
