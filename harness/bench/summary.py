"""The benchmark summary: one Markdown page per run, written beside its JSON (``bench-<stamp>.md``).

On top, what the numbers depend on: the command, device, versions, the copy
bandwidth and launch times measured in the run, the repetition counts and
how far the run got. Then one section per family, one table line per size
in the nccl-tests spirit, from the rows of ``harness.bench.tables`` (the
plots draw the same rows): all-reduce per source, tp, H and M; the decode
loops per rows, steps and ranks against their eager torch loop; the copy
baselines against their floor. Under each table, what its numbers are not
(virtual ranks, stand-ins) and the published figures it cites. Failures and
cases the run never reached close the page.

Times are per-call medians in microseconds, two decimals; a dash is a size
that was not measured. The same text is printed to the terminal at the end
of a run.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from harness.bench import tables

DASH = "-"
GOAL_WORDS = {"speedup_vs_eager": "speedup >= {}", "floor_ratio": "x floor <= {}"}


def _us(value: float | None) -> str:
    """A time in microseconds with two decimals, or a dash."""
    return DASH if value is None else f"{value:.2f}"


def _ratio(value: float | None) -> str:
    """A ratio with two decimals, or a dash."""
    return DASH if value is None else f"{value:.2f}"


def _is_number(text: str) -> bool:
    """Whether a table cell reads as a number (thousands separators allowed)."""
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Lines of a Markdown table, numbers right-aligned; a column that is a dash in every row is left out."""
    keep = [i for i in range(len(header)) if not rows or any(row[i] != DASH for row in rows)]
    numeric = {i: all(_is_number(row[i]) for row in rows if row[i] != DASH) for i in keep}
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


def header_lines(document: Mapping) -> list[str]:
    """The page title and the provenance list: command, device, versions, machine figures, settings, status."""
    device, machine, settings = document["device"], document["machine"], document["settings"]
    version = document["versions"]
    selected = document.get("selected")
    status = document.get("status", "complete")
    progress = f"{len(document['cases'])} cases measured" + (f" of {len(selected)} selected" if selected else "")
    memory = device.get("memory_bytes")
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
        f"- method: warm-up {settings.get('warmup')}, {settings.get('reps')} timed replays per mode; per-call medians of "
        "CUDA-graph replays, inputs rotated beyond the L2; floor = bytes that must move / copy bandwidth + launches",
        f"- status: {status}, {progress}, {len(document['failed'])} failed"
        + (f", {len(document['not_run'])} not reached" if document.get("not_run") else "")
        + (f", {document['wall_s']:.0f} s of wall time" if "wall_s" in document else ""),
        "",
    ]


def allreduce_section(document: Mapping, family: str) -> list[str]:
    """The all-reduce tables (one per source), crossovers, notes and published figures."""
    rows = tables.allreduce_rows(document)
    lines = []
    for source in dict.fromkeys(row["source"] for row in rows):
        body = [
            [str(r["tp"]), str(r["hidden"]), str(r["rows"]), _us(r["ll"]), _us(r["bt"]), _us(r["unfused"]),
             _us(r["symm_mem"]), _us(r["floor"]), _ratio(r["speedup"]), _us(r["flashinfer"])]
            for r in rows if r["source"] == source
        ]
        lines += [f"{source} source, CUDA-graph median per call (us):", ""]
        lines += markdown_table(["tp", "H", "M", "LL", "BT", "unfused", "torch symm-mem", "floor", "unfused / best",
                                 "FlashInfer"], body)
        lines.append("")
    for (tp, hidden, source), found in sorted(tables.crossovers(document).items(), key=lambda kv: kv[0][2] != "plain"):
        verdict = f"BT ahead from M = {found} on" if found is not None else "BT never stays ahead: LL only"
        lines.append(f"- LL/BT crossover, tp {tp}, H {hidden}, {source}: {verdict}")
    return lines + _notes_and_published(document, family)


def loop_section(document: Mapping, family: str) -> list[str]:
    """The loop table: per (rows, steps, ranks) the kernel against the eager torch loop and the floor."""
    body = []
    for r in tables.loop_rows(document, family):
        goals = "; ".join(f"{GOAL_WORDS.get(name, name + ' {}').format(r['goal'][name])}: {'met' if met else 'MISSED'}"
                          for name, met in r["goal_met"].items())
        body.append([str(r["rows"]), str(r["steps"]), str(r["ranks"]), _us(r["kernel"]), _us(r["eager"]),
                     _ratio(r["speedup"]), _us(r["floor"]), _ratio(r["x_floor"]), goals or DASH])
    lines = ["kernel and eager (the torch loop): CUDA-graph median per call (us); speedup = eager / kernel; "
             "x floor = kernel / floor:", ""]
    lines += markdown_table(["rows", "steps", "ranks", "kernel", "eager", "speedup", "floor", "x floor", "goals"], body)
    lines += [""] + [f"- not paired: {error}" for error in tables.unpaired_loop_errors(document, family)]
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
