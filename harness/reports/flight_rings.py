"""``rankcheck flight DIR``: what the kernels' flight recorders left under a directory, one line per instance.

Every instance of a family's public class, in each family whose kernels
package declares a flight recorder (``kernels.flight.declared_families()``),
keeps a ring of its last launches in a file that its kernels write,
CUDA-graph replays included (``kernels.flight``). After a job hung, timed
out or was killed, this command reads every rank's rings under ``DIR``
(recursively; links to ``/dev/shm`` files are first replaced by copies,
``kernels.flight.collect``, and a link whose file is gone is named as
unreadable) and prints, per instance (family and name, e.g.
``<family>.0``), either that the ranks' records agree or the finding's
sentence: the rank, the launch (the instance's launch counter, as the
kernels number it), the kernel and what differed
(``kernels.flight.first_divergence``). It needs neither the job nor a GPU.

Exit codes: 0 every instance consistent; 1 a divergence named (printed
first; files that could not be read are still named); 2 nothing to judge
or a judgement that would be incomplete: ``DIR`` is not a directory, holds
no ring, a file under it is not a readable ring, or two rings claim one
rank of one instance (each named). ``--json PATH`` writes the same as
``{"format": "rankcheck-flight", "version": 1, "directory", "rings",
"findings": [Finding.to_json()], "problems", "exit"}``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TextIO

from harness.wire.atomic_file import atomic_write
from kernels import flight

FORMAT, VERSION = "rankcheck-flight", 1
EXIT_CONSISTENT, EXIT_DIVERGENCE, EXIT_UNREADABLE = 0, 1, 2


def read_findings(directory: Path) -> tuple[list[flight.Ring], list[flight.Finding], list[str]]:
    """(rings, findings, problems) of the rings under ``directory``, links collected first."""
    if not directory.is_dir():
        return [], [], [f"{directory}: not a directory"]
    dangling = [f"{path}: a link to {os.readlink(path)}, which is gone (its ring cannot be read)"
                for path in flight.ring_paths(directory) if path.is_symlink() and not path.exists()]
    try:
        flight.collect(directory)
        rings, problems = flight.read_directory(directory)
        problems = dangling + problems
        findings = flight.first_divergence(rings)
    except (OSError, flight.FlightFormatError) as exc:  # a vanished link target, two rings of one rank
        return [], [], [str(exc)]
    if not rings and not problems:
        problems = [f"{directory}: no flight-recorder ring (*{flight.RING_SUFFIX}) under it"]
    return rings, findings, problems


def exit_code(findings: list[flight.Finding], problems: list[str]) -> int:
    """1 when a divergence is named, else 2 when a file was unreadable or there was none, else 0."""
    if any(not f.consistent for f in findings):
        return EXIT_DIVERGENCE
    return EXIT_UNREADABLE if problems or not findings else EXIT_CONSISTENT


def print_findings(directory: Path, rings: list[flight.Ring], findings: list[flight.Finding], problems: list[str],
                   out: TextIO) -> None:
    """The summary line, one line per instance (divergent first), then one per unreadable file."""
    ranks = sorted({ring.header.rank for ring in rings})
    print(f"{len(rings)} ring(s) of {len({(f.family, f.instance) for f in findings})} instance(s) from rank(s) "
          f"{', '.join(map(str, ranks)) or 'none'} under {directory}", file=out)
    for finding in findings:
        print(("consistent: " if finding.consistent else "DIVERGENCE: ") + finding.describe(), file=out)
    for line in problems:
        print(f"UNREADABLE: {line}", file=out)


def run_flight(directory: str, json_path: str | None = None, out: TextIO | None = None) -> int:
    """Read, print (to ``out``, default stdout) and with ``json_path`` write the findings of the rings under
    ``directory``; the exit code."""
    out = out if out is not None else sys.stdout
    root = Path(directory)
    rings, findings, problems = read_findings(root)
    code = exit_code(findings, problems)
    print_findings(root, rings, findings, problems, out)
    verdict = {EXIT_CONSISTENT: "every instance's ranks agree", EXIT_DIVERGENCE: "a divergence is named",
               EXIT_UNREADABLE: "nothing to judge, or files that could not be read"}[code]
    print(f"flight: {verdict} (exit {code})", file=out)
    if json_path:
        document = {"format": FORMAT, "version": VERSION, "directory": str(root),
                    "rings": [ring.path for ring in rings], "findings": [f.to_json() for f in findings],
                    "problems": problems, "exit": code}
        atomic_write(Path(json_path), json.dumps(document, indent=1) + "\n")
    return code


__all__ = ["EXIT_CONSISTENT", "EXIT_DIVERGENCE", "EXIT_UNREADABLE", "exit_code", "read_findings", "run_flight"]
