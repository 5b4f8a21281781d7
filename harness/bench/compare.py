"""Two benchmark results side by side: each case's change as a ratio, new median over old.

Cases are matched by ``family/name``. For each case in both documents the
ratio of the new to the old per-call median, in CUDA graphs and with eager
launches (below 1: faster now); cases found in only one document are listed
by family, never silently dropped. The output is Markdown, so that a
comparison can be kept beside the results it compares, as it was printed.
"""

from __future__ import annotations

from typing import Mapping

from harness.bench.summary import markdown_table


def _keyed(document: Mapping) -> dict[str, dict]:
    """The document's case entries by ``family/name``."""
    return {f"{case['family']}/{case['name']}": case for case in document["cases"]}


def compare(old: Mapping, new: Mapping) -> dict:
    """``{"matched": [per-case medians and new/old ratios], "only_old": [keys], "only_new": [keys]}``."""
    before, after = _keyed(old), _keyed(new)
    matched = []
    for key in (k for k in after if k in before):
        row = {"case": key}
        for mode in ("graph", "eager"):
            old_us, new_us = before[key][mode]["median_us"], after[key][mode]["median_us"]
            row[f"old_{mode}"], row[f"new_{mode}"], row[f"{mode}_ratio"] = old_us, new_us, new_us / old_us
        matched.append(row)
    return {
        "matched": matched,
        "only_old": [k for k in before if k not in after],
        "only_new": [k for k in after if k not in before],
    }


def _describe(label: str, document: Mapping) -> str:
    """One line naming a document: its label (path), date, device, settings and command."""
    settings = document.get("settings", {})
    return (f"- {label}: {document['date']}, {document['device'].get('name', '?')}, warm-up {settings.get('warmup')}, "
            f"{settings.get('reps')} reps, `{' '.join(document['command'])}`")


def _by_family(keys: list[str]) -> list[str]:
    """``family (n): name, name`` lines for a list of ``family/name`` keys."""
    groups: dict[str, list[str]] = {}
    for key in keys:
        family, _, name = key.partition("/")
        groups.setdefault(family, []).append(name)
    return [f"  - {family} ({len(names)}): {', '.join(names)}" for family, names in groups.items()]


def compare_markdown(old: Mapping, new: Mapping, old_label: str = "old", new_label: str = "new") -> str:
    """The comparison page: both documents named, the ratio table, the unmatched cases."""
    result = compare(old, new)
    lines = ["# Benchmark comparison (ratio = new / old median per call; below 1 is faster)", "",
             _describe(f"old `{old_label}`", old), _describe(f"new `{new_label}`", new), ""]
    body = [[row["case"], f"{row['old_graph']:.2f}", f"{row['new_graph']:.2f}", f"{row['graph_ratio']:.3f}",
             f"{row['old_eager']:.2f}", f"{row['new_eager']:.2f}", f"{row['eager_ratio']:.3f}"]
            for row in result["matched"]]
    if body:
        lines += markdown_table(["case", "old graph us", "new graph us", "graph new/old",
                                 "old eager us", "new eager us", "eager new/old"], body)
    else:
        lines.append("No case is in both documents.")
    lines.append("")
    for key, title in (("only_old", "only in old"), ("only_new", "only in new")):
        if result[key]:
            lines += [f"- {title} ({len(result[key])}):"] + _by_family(result[key])
    return "\n".join(lines).rstrip() + "\n"
