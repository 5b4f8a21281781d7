"""A log of how long validation runs took: one entry per run, with its command, device, commit and cache state.

``python -m harness.reports.timing_log REPORT.json [--out LOG] --command "make validate"
--cache cold|warm [--device NAME]`` appends one run,
``{"command", "device", "date", "commit", "cache", "wall_s", "cases",
"failed"}``, to the ``{"runs": [...]}`` document at ``--out`` (creating it; default
``runs/validate-timing.json`` under the repository root, git-ignored; the
log of record is kept with ``--out docs/results/validate-timing.json``),
so the goal of a run time can be checked against measurements rather than
memory. The numbers come from the validate JSON report: ``wall_s`` and
``cases`` from its summary, ``failed`` from the summary's failing counts;
device, date and commit from the report's provenance block where it has
one, else from this machine (``harness.reports.provenance``) and the report file's
time. ``--device`` names the device when the report's own name for it is
not the one to record. Whether the caches were cold or warm is only known
to whoever ran it, so it is a required argument.

Bad input (a missing or unreadable report, one without the summary's
numbers, an ``--out`` file that is not a timing log) is refused with a
message and exit code 2, and the log is left as it was; the log is
replaced atomically, so an interrupted append never leaves half a file.
One writer at a time: two appends racing may keep only one of the runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.reports import provenance as facts
from harness.wire.atomic_file import atomic_write
from harness.wire.case_files import REPO_ROOT
from harness.wire.case_result import FAILING

DEFAULT_OUT = REPO_ROOT / "runs" / "validate-timing.json"
CACHE_STATES = ("cold", "warm")
EXIT_BAD_INPUT = 2


class BadInput(ValueError):
    """An input the timing log refuses: the message says which and why."""


def read_json(path: Path, what: str) -> Any:
    """The JSON document at ``path``, or BadInput naming ``what`` it should have been."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{what} {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{what} {path} cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} {path} is not JSON: {exc}") from None


def summary_numbers(report: Any, path: Path) -> dict:
    """``wall_s``, ``cases`` and ``failed`` from a validate report's summary (BadInput when it has none)."""
    summary = report.get("summary") if isinstance(report, Mapping) else None
    if not isinstance(summary, Mapping):
        raise BadInput(f"report {path} has no summary: is it the --json file of `python -m harness validate`?")
    wall_s, cases = summary.get("wall_s"), summary.get("cases")
    for name, value in (("wall_s", wall_s), ("cases", cases)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise BadInput(f"report {path}: summary.{name} must be a non-negative number, got {value!r}")
    counts = summary.get("counts")
    if not isinstance(counts, Mapping):
        raise BadInput(f"report {path}: summary.counts (cases per status) is missing")
    try:
        failed = sum(int(counts.get(status, 0)) for status in FAILING)
    except (TypeError, ValueError):
        raise BadInput(f"report {path}: summary.counts must hold a number per status, got {dict(counts)!r}") from None
    return {"wall_s": round(float(wall_s), 1), "cases": int(cases), "failed": failed}


def device_name(provenance: Mapping | None) -> str:
    """The device a run used, from a provenance block (this machine's when None): ``NxGPU name`` or ``cpu``."""
    if provenance is None:
        gpus = facts.gpus()
    else:
        gpus = provenance.get("gpus") or {}
    names = [str(n) for n in gpus.get("names") or []]
    if not names:
        return "cpu"
    if len(set(names)) == 1:
        return f"{len(names)}x {names[0]}"
    return ", ".join(names)


def run_facts(report: Any, path: Path, device: str | None = None) -> dict:
    """``device`` (unless given), ``date`` and ``commit`` of the run: the report's provenance first, this machine's after."""
    provenance = report.get("provenance") if isinstance(report, Mapping) else None
    provenance = provenance if isinstance(provenance, Mapping) else None
    git = (provenance or {}).get("git")
    commit = git.get("commit") if isinstance(git, Mapping) else None
    date = (provenance or {}).get("started")
    return {"device": device or device_name(provenance),
            # Without provenance the report file's last write is the closest record of when the run was.
            "date": date if isinstance(date, str) and date else facts.utc_iso(path.stat().st_mtime),
            "commit": commit if isinstance(commit, str) and commit else facts.git_state()["commit"]}


def load_log(out: Path) -> dict:
    """The timing log at ``out`` (an empty one when the file does not exist; BadInput when it is not a log)."""
    if not out.exists():
        return {"runs": []}
    doc = read_json(out, "timing log")
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), list):
        raise BadInput(f"timing log {out} is not a {{\"runs\": [...]}} document; refusing to overwrite it")
    return doc


def append_run(report_path: Path, out: Path, *, command: str, cache: str, device: str | None = None) -> dict:
    """Append the run of ``report_path`` to the timing log at ``out`` and return the entry appended."""
    if not command.strip():
        raise BadInput("--command must name the command that was timed (e.g. \"make validate\")")
    if cache not in CACHE_STATES:
        raise BadInput(f"--cache must be one of {CACHE_STATES}, got {cache!r}")
    report = read_json(report_path, "report")
    numbers = summary_numbers(report, report_path)
    facts = run_facts(report, report_path, device)
    log = load_log(out)
    entry = {"command": command, "device": facts["device"], "date": facts["date"],
             "commit": facts["commit"], "cache": cache, **numbers}
    log["runs"].append(entry)
    atomic_write(out, json.dumps(log, indent=1) + "\n")
    return entry


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, append the run and print it; 2 with a message on bad input."""
    parser = argparse.ArgumentParser(prog="python -m harness.reports.timing_log", description=__doc__.split("\n")[0])
    parser.add_argument("report", type=Path, help="the JSON report of `python -m harness validate --json`")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="the timing log (default runs/validate-timing.json)")
    parser.add_argument("--command", required=True, help="the command that was timed, e.g. \"make validate\"")
    parser.add_argument("--cache", required=True, choices=CACHE_STATES, help="whether the caches started cold or warm")
    parser.add_argument("--device", help="the device to record (default: from the report's provenance)")
    args = parser.parse_args(argv)
    try:
        entry = append_run(args.report, args.out, command=args.command, cache=args.cache, device=args.device)
    except BadInput as exc:
        print(f"harness.reports.timing_log: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{args.out}: appended {json.dumps(entry)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
