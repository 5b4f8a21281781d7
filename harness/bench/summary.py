"""The benchmark summary: one Markdown page per run, written beside its JSON (``bench-<stamp>.md``).

On top, what the numbers depend on and how every one of them was taken,
stated once: the command, device, versions, the copy bandwidth and launch
times measured in the run, the timing method exactly as the runner applies
it (``method_lines``: input rotation against the L2, CUDA-graph replays,
the median), the floor's definition and the ratios' definitions, and how
far the run got. Then one section per family, one table line per size in
the nccl-tests spirit, from the rows of ``harness.bench.tables`` (the plots
draw the same rows), each line with its figures and its ratios side by
side: all-reduce per source, tp, H and M (LL, BT, the unfused baseline,
the peers, the floor, eager / best, best peer / best, best / floor);
the decode loops per rows, steps and ranks against their eager torch loop
and floor; the copy baselines against their floor. Under each table the
family's floor formula, what its numbers are not (virtual ranks,
stand-ins), the peers' distance from the golden bits, why a cell reads
``n/a``, and the published figures it cites. Failures and cases the run
never reached close the page.

Times are per-call medians in microseconds, two decimals; a dash is a size
that was not measured, ``n/a`` one that could not run here (the reason is
under the table); a letter after a time marks a figure measured otherwise
than the header says (``tables.EAGER_MARK``, ``tables.L2_MARK``). The same
text is printed to the terminal at the end of a run.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from harness.bench import tables
from harness.bench.floor import MAX_SETS, SHARED_MAX_SETS

DASH = "-"
NOT_AVAILABLE = "n/a"
ROTATION_FACTOR = 2.0  # harness.bench.runner's, for documents whose settings do not state it
PEER_LABELS = {"symm_one_shot": "symm-mem one-shot", "symm_two_shot": "symm-mem two-shot", "nccl": "NCCL"}
IMPL_LABELS = {"ll": "LL", "bt": "BT", "unfused": "unfused", **PEER_LABELS}
CHAINED_HEADERS = ["LL chained", "LL chained / floor"]
CHAINED_NOTE = ("LL chained: the same LL calls with each virtual rank's calls back to back on its stream, forked "
                "and joined once per graph as ranks on their own GPUs run them; the other columns join every "
                "rank's stream after each call (lockstep), a cost of the virtual ranks, not of the kernel.")
GOAL_WORDS = {"speedup_vs_eager": "speedup >= {}", "floor_ratio": "x floor <= {}"}


def _us(value: float | None) -> str:
    """A time in microseconds with two decimals, or a dash."""
    return DASH if value is None else f"{value:.2f}"


def _ratio(value: float | None) -> str:
    """A ratio with two decimals, or a dash."""
    return DASH if value is None else f"{value:.2f}"


def _is_number(text: str) -> bool:
    """Whether a table cell reads as a number (thousands separators and a trailing method mark allowed)."""
    try:
        float(text.replace(",", "").rstrip(tables.EAGER_MARK + tables.L2_MARK + tables.WRONG_MARK))
    except ValueError:
        return False
    return True


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Lines of a Markdown table, numbers right-aligned; a column that is a dash in every row is left out."""
    keep = [i for i in range(len(header)) if not rows or any(row[i] != DASH for row in rows)]
    numeric = {i: all(_is_number(row[i]) for row in rows if row[i] not in (DASH, NOT_AVAILABLE)) for i in keep}
    lines = ["| " + " | ".join(header[i] for i in keep) + " |",
             "|" + "|".join(" ---: " if numeric[i] else " --- " for i in keep) + "|"]
    lines += ["| " + " | ".join(row[i] for i in keep) + " |" for row in rows]
    return lines


def _short_git(revision: str | None) -> str:
    """A git revision shortened to 7 hex digits, keeping a ``+dirty`` mark; ``unknown`` when absent."""
    if not revision:
        return "unknown"
    head, plus, rest = revision.partition("+")
    return head[:7] + plus + rest


def method_lines(settings: Mapping, torchrun: bool) -> list[str]:
    """The method every figure of the page follows, as the runner applies it (``harness.bench.runner``)."""
    factor = settings.get("rotation_factor", ROTATION_FACTOR)
    lines = [
        f"- method, every figure: a case's calls walk distinct input sets in turn, as many as make their footprint "
        f"at least {factor:g} x the L2 (at most {MAX_SETS} sets and 8 GiB; a time marked `{tables.L2_MARK}` did not reach "
        "that and may have read its inputs from the L2); the L2 is never flushed, and buffers internal to an "
        "implementation (mailboxes, symmetric buffers, workspaces) are not rotated. One CUDA graph captures a "
        f"sequence of at least 16 calls; after {settings.get('warmup')} warm-up replays, {settings.get('reps')} "
        "replays are timed each between two CUDA events; a figure is the median over the replays of replay time / "
        f"calls per replay, in us. A case that cannot be captured (marked `{tables.EAGER_MARK}`) is timed the same "
        "way with eager launches.",
        "- floor = bytes the call must move (each family's terms under its table) / the copy bandwidth above + "
        "kernels per call x the empty launch in a CUDA graph",
        "- ratios: unfused / best and eager / kernel: the eager torch baseline over ours (speedup); best peer / "
        "best: the fastest peer over ours; best / floor and x floor: ours over the floor (1.00 = at the floor); "
        f"best: the faster of LL and BT at that size; a peer's time marked `{tables.WRONG_MARK}` failed its golden sanity "
        "check there: no ratio is taken against it",
    ]
    if torchrun:
        lines.append("- torchrun cases: every rank captures and replays its own graph, the ranks in lockstep (a "
                     "barrier before each implementation); the figure is rank 0's. Where ranks share one GPU they "
                     "take turns on it, each call waiting for the peers' turns, and at most "
                     f"{SHARED_MAX_SETS} input sets rotate (marked `w` where that stays under the target). "
                     "Processes sharing one GPU without MPS are time-sliced: a call that waits for a peer process "
                     "(LL, BT and torch symmetric memory's all-reduce alike) waits for the driver to switch to that "
                     "peer, so such a figure is a count of time slices (about 2.25 ms each on the H200), not a "
                     "kernel time; the virtual-rank cases (one process, a stream per rank) time the kernels")
    return lines


def header_lines(document: Mapping) -> list[str]:
    """The page title and the provenance list: command, device, versions, machine figures, method, status."""
    device, machine, settings = document["device"], document["machine"], document["settings"]
    version = document["versions"]
    selected = document.get("selected")
    status = document.get("status", "complete")
    progress = f"{len(document['cases'])} cases measured" + (f" of {len(selected)} selected" if selected else "")
    memory = device.get("memory_bytes")
    torchrun = any(case["params"].get("launcher") == "torchrun" for case in document["cases"])
    return [
        f"# Benchmarks on {device.get('name', '?')}, {document['date']}",
        "",
        f"- command: `{' '.join(document['command'])}`",
        f"- device: {device.get('name', '?')}, sm {device.get('capability', '?')}, {device.get('sm_count', '?')} SMs"
        + (f", {memory / 2**30:.0f} GiB" if memory else "")
        + (f", L2 {device['l2_bytes'] / 2**20:.0f} MiB" if device.get("l2_bytes") else ""),
        f"- versions: torch {version.get('torch')}, CUDA {version.get('cuda')}, CuTe DSL {version.get('cutlass_dsl')}, "
        f"python {version.get('python')}, git {_short_git(version.get('git'))}",
        f"- measured in this run: copy bandwidth {machine['copy_bandwidth_bytes_per_s'] / 1e9:.0f} GB/s (read + write), "
        f"empty launch {machine['graph_launch_us']:.2f} us in a CUDA graph, {machine['eager_launch_us']:.2f} us eagerly",
        *method_lines(settings, torchrun),
        f"- status: {status}, {progress}, {len(document['failed'])} failed"
        + (f", {len(document['not_run'])} not reached" if document.get("not_run") else "")
        + (f", {document['wall_s']:.0f} s of wall time" if "wall_s" in document else ""),
        "",
    ]


def _cell(row: Mapping, impl: str) -> str:
    """An all-reduce implementation's time in ``row`` with its method marks, ``n/a`` where it could not run, or a dash."""
    if row[impl] is not None:
        return _us(row[impl]) + row["marks"].get(impl, "")
    return NOT_AVAILABLE if impl in row["unavailable"] else DASH


def allreduce_section(document: Mapping, family: str) -> list[str]:
    """The all-reduce tables (one per source), crossovers, floor rule, peers' bits, what is n/a, notes, published."""
    rows = tables.allreduce_rows(document, family)
    lines = []
    for source in dict.fromkeys(row["source"] for row in rows):
        mine = [r for r in rows if r["source"] == source]
        chained = any(r[tables.CHAINED] is not None for r in mine)  # documents before graph_chained have none
        body = [
            [str(r["tp"]), str(r["hidden"]), str(r["rows"]), *(_cell(r, impl) for impl in tables.ALLREDUCE_IMPLS),
             _us(r["floor"]), _ratio(r["speedup"]), _ratio(r["vs_peer"]), _ratio(r["x_floor"]), _us(r["flashinfer"]),
             *([_us(r[tables.CHAINED]), _ratio(r["x_floor_chained"])] if chained else [])]
            for r in mine
        ]
        lines += [f"{source} source, median per call (us), ratios of the faster protocol:", ""]
        lines += markdown_table(["tp", "H", "M", *(IMPL_LABELS[impl] for impl in tables.ALLREDUCE_IMPLS), "floor",
                                 "unfused / best", "best peer / best", "best / floor", "FlashInfer",
                                 *(CHAINED_HEADERS if chained else [])], body)
        if chained:
            lines.append(f"\n{CHAINED_NOTE}")
        if not any(r[peer] is not None or peer in r["unavailable"] for r in mine for peer in tables.PEERS):
            lines.append("\nNo peer at this source (best peer / best: none): the peers run in the torchrun cases.")
        lines.append("")
    for (tp, hidden, source), found in sorted(tables.crossovers(document, family).items(), key=lambda kv: kv[0][2] != "plain"):
        verdict = f"BT ahead from M = {found} on" if found is not None else "BT never stays ahead: LL only"
        lines.append(f"- LL/BT crossover, tp {tp}, H {hidden}, {source}: {verdict}")
    lines += [f"- floor: {rule}" for rule in tables.floor_rules(document, family)]
    return lines + _golden_lines(document, family) + _unavailable_lines(rows) + _notes_and_published(document, family)


def _golden_lines(document: Mapping, family: str) -> list[str]:
    """Per implementation of ``family`` that recorded it, its largest distance from the golden bits at each shape."""
    lines = []
    for impl, checks in tables.peer_checks(document, family).items():
        shapes = ", ".join(f"tp {c['tp']} M {c['rows']}: " + "/".join(str(v) for v in c["ulp"].values())
                           + ("" if c["plausible"] in (True, None) else
                              f" (BEYOND the sanity tolerance: its times are marked `{tables.WRONG_MARK}` and "
                              "no ratio is taken against them)")
                           for c in checks)
        held = checks[0]["held_to"] or "not stated"
        lines.append(f"- {IMPL_LABELS.get(impl, impl)} against the golden bits, largest BF16 ulp distance "
                     f"residual_out/layer_input (held to {held}): {shapes}")
    return lines


def _unavailable_lines(rows: list[dict]) -> list[str]:
    """Why a cell reads ``n/a``: per implementation and reason, the shapes it applies to."""
    reasons: dict[tuple, list[str]] = {}
    for row in rows:
        for impl, why in row["unavailable"].items():
            reasons.setdefault((impl, why), []).append(f"tp {row['tp']} M {row['rows']}")
    return [f"- {IMPL_LABELS.get(impl, impl)} {NOT_AVAILABLE} ({', '.join(shapes)}): not available: {why}"
            for (impl, why), shapes in reasons.items()]


def loop_section(document: Mapping, family: str) -> list[str]:
    """The loop table: per (rows, steps, ranks) the kernel against the eager torch loop and the floor."""
    body = []
    for r in tables.loop_rows(document, family):
        goals = "; ".join(f"{GOAL_WORDS.get(name, name + ' {}').format(r['goal'][name])}: {'met' if met else 'MISSED'}"
                          for name, met in r["goal_met"].items())
        body.append([str(r["rows"]), str(r["steps"]), str(r["ranks"]), _us(r["kernel"]) + r["marks"]["kernel"],
                     _us(r["eager"]) + r["marks"]["eager"],
                     _ratio(r["speedup"]), _us(r["floor"]), _ratio(r["x_floor"]), goals or DASH])
    lines = ["kernel and eager (the torch loop): median per call (us); speedup = eager / kernel; "
             "x floor = kernel / floor:", ""]
    lines += markdown_table(["rows", "steps", "ranks", "kernel", "eager", "speedup", "floor", "x floor", "goals"], body)
    lines += ["", "- no peer is measured for this family: its eager torch loop is the comparison"]
    lines += [f"- not paired: {error}" for error in tables.unpaired_loop_errors(document, family)]
    lines += [f"- {', '.join(names)}: {formula}" for formula, names in tables.floor_formulas(document, family).items()]
    virtual = sorted({r["ranks"] for r in tables.loop_rows(document, family) if r["virtual"]})
    if virtual:
        lines.append(f"- ranks {', '.join(map(str, virtual))}: virtual ranks on one GPU, not a latency measurement of NVLink")
    return lines + _notes_and_published(document, family)


def copy_section(document: Mapping, family: str) -> list[str]:
    """The copy baselines: how close a plain copy comes to its floor (the method's own check)."""
    body = [[r["case"], f"{r['bytes']:,}", _us(r["graph"]), _us(r["floor"]), _ratio(r["efficiency"])]
            for r in tables.copy_rows(document, family)]
    lines = ["A plain copy should run at its floor; efficiency = floor / median (CUDA graph):", ""]
    return lines + markdown_table(["case", "bytes moved", "median", "floor", "efficiency"], body) + [""]


def generic_section(document: Mapping, family: str) -> list[str]:
    """Any other family: per case both medians, the floor and the distance to it."""
    body = [[r["case"], _us(r["graph"]), _us(r["eager"]), _us(r["floor"]), _ratio(r["x_floor"])]
            for r in tables.generic_rows(document, family)]
    return markdown_table(["case", "graph", "eager launches", "floor", "x floor"], body) + [""]


def _notes_and_published(document: Mapping, family: str) -> list[str]:
    """Bullets: what the family's numbers are not, and the published figures its cases cite, by source."""
    notes = tables.notes(document, family)
    lines = [f"- note: {note}" for note in notes if not any(note != other and note in other for other in notes)]
    by_source: dict[str, list[str]] = {}
    for reference in tables.published(document, family):
        source = str(reference.get("source", "?")).removesuffix("; published, not measured here")
        by_source.setdefault(source, []).append(f"{reference.get('note', '')}: {reference['value_us']} us")
    lines += [f"- published, not measured here ({source}): " + "; ".join(figures) for source, figures in by_source.items()]
    return lines + [""] if lines else []


SECTIONS: dict[str, Callable[[Mapping, str], list[str]]] = {
    "allreduce": allreduce_section, "loop": loop_section, "copy": copy_section, "generic": generic_section,
}


def summary_markdown(document: Mapping) -> str:
    """The whole summary page of a results document."""
    lines = header_lines(document)
    # The copy baselines check the method: they come last, after the families they vouch for.
    for family in sorted(tables.families(document), key=lambda f: tables.layout_of(f) == "copy"):
        body = SECTIONS[tables.layout_of(family)](document, family)
        lines += [f"## {family}", ""] + body + ([""] if body and body[-1] else [])
    if document["failed"]:
        lines += ["## Failed", ""] + [f"- {f.get('case') or f.get('module')}: {f['error']}" for f in document["failed"]]
        lines.append("")
    if document.get("not_available"):
        lines += ["## Not available here", ""] + [
            f"- {item['case']}: {item['why']}" + (" (a peer: optional)" if item.get("optional") else "")
            for item in document["not_available"]] + [""]
    if document.get("not_run"):
        lines += ["## Not reached", "", ", ".join(document["not_run"]), ""]
    return "\n".join(lines).rstrip() + "\n"
