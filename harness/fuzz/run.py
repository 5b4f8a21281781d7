"""Running drawn scenarios through the harness, and the fuzz loop itself.

``BatchRunner`` writes a batch of scenario dicts as safe YAML under
``<run>/fuzz/<tag>/<family>/`` and runs them with ``run_validate`` in this
process (``scenario_root`` pointing there), so a batch is one harness run:
one job per world the batch has, whatever its number of cases, and the
interpreter's imports are paid once for the whole fuzz run. Each case's
verdict is read back from the run's JSON report; its *signature* is None
for a pass, else the status (``fail``, ``timeout``) or, for an error, the
status and the exception type named in the detail, so that the shrinker
keeps a reduction only when the bug it shows is the same. The harness's
own output goes to ``<run>/fuzz/<tag>/validate.log``.

``fuzz`` draws batches from ``random.Random(seed)`` until the budget is
spent (checked between batches: the running batch finishes, and a batch is
cut to the cases that the last batch's time per case says fit in what is
left; the sequence of cases a seed draws never depends on it), and on the
first failing case shrinks it (``harness.fuzz.shrink``) with the same
runner, writes the minimal scenario to ``<run>/fuzz/shrunk/<family>/`` and
returns the ``harness replay`` command that reproduces it. No reference or
kernel goes to the persistent cache (every drawn input is new) and the
stored golden bits are not checked (no drawn scenario has any).
"""

from __future__ import annotations

import json
import random
import re
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import yaml

from harness.fuzz.draw import draw_scenario
from harness.fuzz.shrink import shrink
from harness.wire.case_result import EXIT_INTERRUPTED


class FuzzInterrupted(KeyboardInterrupt):
    """The harness run of a batch was interrupted (its verdict was 130)."""


def write_scenario(root: Path, scenario: dict) -> Path:
    """``scenario`` as a safe-YAML file ``<root>/<family>/<name>.yaml``; its path."""
    path = root / scenario["family"] / f"{scenario['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(scenario, sort_keys=False, default_flow_style=None, width=120), encoding="utf-8")
    return path


def signature_of(result: dict) -> tuple | None:
    """A case's failure signature from its report entry: None for a pass, else status (and error type)."""
    status = result.get("status")
    if status in ("pass", "not-available"):  # not available is no finding: BatchRunner.unavailable counts it
        return None
    if status == "error":
        found = re.search(r"\b([A-Z][A-Za-z]*(?:Error|Exception|Mismatch|Timeout))\b", result.get("detail") or "")
        return (status, found.group(1) if found else "")
    return (status,)


@dataclass
class BatchRunner:
    """Runs batches of scenario dicts through ``run_validate`` (one harness run per batch) and signs each case."""

    run_dir: Path
    launcher: str = "cpu"
    impl: str | None = None
    batches: int = 0
    details: dict = field(default_factory=dict)  # scenario name -> the report's detail of its last run
    unavailable: set = field(default_factory=set)  # names of the cases the report said are not available here

    def run(self, scenarios: Sequence[dict], tag: str | None = None) -> list:
        """The signature of each scenario (None: passed), in order; FuzzInterrupted when the run was interrupted."""
        from harness.validate import ValidateRequest, run_validate  # noqa: PLC0415 - imports torch: --help starts without it

        tag = tag or f"batch{self.batches:03d}"
        self.batches += 1
        root = self.run_dir / "fuzz" / tag
        renamed = []
        for i, scenario in enumerate(scenarios):
            # names unique within the batch: shrink candidates all derive from one name
            renamed.append(dict(scenario, name=f"{tag}_{i:03d}") if tag.startswith("shrink") else scenario)
            write_scenario(root / "scenarios", renamed[-1])
        family = scenarios[0]["family"]
        with open(root / "validate.log", "w", encoding="utf-8") as log:
            code = run_validate(ValidateRequest(launcher=self.launcher, family=family, size="cpu",
                                                run_dir=str(root / "run"), scenario_root=str(root / "scenarios"),
                                                impl=self.impl, store=None, cache=False), stream=log)
        if code == EXIT_INTERRUPTED:
            raise FuzzInterrupted(f"interrupted in {tag}")
        return self._signatures(root / "run" / "report.json", [s["name"] for s in renamed])

    def _signatures(self, report_path: Path, names: Sequence[str]) -> list:
        """Each named case's signature from the report (a case the report lacks is an error of its own)."""
        try:
            results = json.loads(report_path.read_text(encoding="utf-8")).get("results", [])
        except (OSError, ValueError):
            results = []
        by_name = {r.get("scenario"): r for r in results}
        out = []
        for name in names:
            result = by_name.get(name, {"status": "error", "detail": "no verdict in the report"})
            self.details[name] = result.get("detail") or result.get("first_mismatch") or ""
            if result.get("status") == "not-available":
                self.unavailable.add(name)
            out.append(signature_of(result))
        return out


@dataclass
class FuzzResult:
    """What a fuzz run found: cases tried, and for a failure the case, its signature, the shrunk file and replay."""

    tried: int
    failing: dict | None = None
    signature: tuple | None = None
    detail: str = ""
    shrunk: dict | None = None
    shrunk_path: Path | None = None
    replay: str = ""


def replay_command(path: Path, scenario: dict, launcher: str, impl: str | None) -> str:
    """The ``harness replay`` command line that runs the scenario file at ``path`` (its root holds only it)."""
    argv = ["python", "-m", "harness", "replay", f"{scenario['family']}/{scenario['name']}",
            "--world", str(scenario["worlds"][0]), "--launcher", launcher]
    if impl:
        argv += ["--impl", impl]
    argv += ["--scenario-root", str(path.parent.parent)]
    return shlex.join(argv)


def fuzz(family: str, worlds: Sequence[int], seed: int, budget_s: float, runner: BatchRunner, *,
         batch: int = 4, shrink_budget_s: float = 600.0, log: Callable[[str], None] = print) -> FuzzResult:
    """Draw and run batches until ``budget_s`` is spent or a case fails; shrink the first failing case."""
    rng = random.Random(seed)
    started, tried, per_case = time.monotonic(), 0, 0.0
    while time.monotonic() - started < budget_s:
        # the last batch's time per case says how many of the next batch fit in what is left (at least one);
        # the cases are drawn one after another from one generator, so their sequence never depends on this
        left = budget_s - (time.monotonic() - started)
        size = batch if not per_case else max(1, min(batch, int(left / per_case)))
        drawn = [draw_scenario(rng, family, worlds, tried + i) for i in range(size)]
        batch_started = time.monotonic()
        signatures = runner.run(drawn)
        per_case = (time.monotonic() - batch_started) / len(drawn)
        tried += len(drawn)  # the whole batch ran; the first failure in drawing order is the one shrunk
        for scenario, sig in zip(drawn, signatures):
            if sig is not None:
                detail = runner.details.get(scenario["name"], "")
                log(f"{tried} cases tried (seed {seed}); {scenario['name']} failed: {' '.join(sig)}: {detail[:200]}")
                return _shrunk(FuzzResult(tried, scenario, sig, detail), runner, shrink_budget_s, log)
        log(f"{tried} cases tried, {time.monotonic() - started:.0f} s of {budget_s:g} s")
    return FuzzResult(tried)


def _shrunk(result: FuzzResult, runner: BatchRunner, budget_s: float, log: Callable[[str], None]) -> FuzzResult:
    """``result`` with its failing case shrunk, written under the run directory, and the replay command."""
    failing_root = runner.run_dir / "fuzz" / "failing"
    write_scenario(failing_root, result.failing)
    rounds = iter(range(10**6))
    minimal = shrink(result.failing, result.signature,
                     lambda cands: runner.run(cands, tag=f"shrink{next(rounds):03d}"), budget_s=budget_s, log=log)
    minimal = dict(minimal, name=f"{result.failing['name']}_min",
                   description=f"shrunk from {result.failing['name']} (fuzz); fails: {' '.join(result.signature)}")
    result.shrunk = minimal
    result.shrunk_path = write_scenario(runner.run_dir / "fuzz" / "shrunk", minimal)
    result.replay = replay_command(result.shrunk_path, minimal, runner.launcher, runner.impl)
    return result


__all__ = ["BatchRunner", "FuzzInterrupted", "FuzzResult", "fuzz", "replay_command", "signature_of",
           "write_scenario"]
