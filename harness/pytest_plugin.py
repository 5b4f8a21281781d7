"""The pytest plugin: every scenario x world x launcher is a test item, run by the harness's own runner.

Collection. A scenario file ``<root>/<family>/<name>.yaml`` is a file node,
with one item per world the scenario lists (``--rankcheck-world`` keeps
some) and per launcher (``--rankcheck-launcher``, repeatable, default
``auto``: chosen from the GPUs present, as ``validate`` does). Node ids are
``scenarios/<family>/<name>.yaml::world=4``, with ``[LAUNCHER]``
after the world when several launchers are asked for. The repository's
``scenarios/`` is collected only when the command line names it or a path
inside it (``pytest scenarios/``, ``pytest scenarios/<family>``, a
file, a node id); ``--rankcheck-scenario-root DIR`` adds another root,
collected wherever pytest reaches it. So ``make test`` (``testpaths =
tests``) and ``pytest .`` never collect scenarios. Items of scenarios
outside the run's size class (``--rankcheck-size``; default as
``validate``: ``cpu`` without a GPU) are skipped with the reason. Each item
matches ``-k`` on the words ``validate -k`` uses
(``harness.families.selection.case_words``), so an expression selects the
same cases on both paths; ``--lf``, ``-m``, node ids and ``--deselect``
work on the items as pytest users expect.

Running. At ``pytest_runtestloop``, before any item runs, the selected
items of each launcher (and scenario root) go to
``harness.validate.run_validate`` as ``ValidateRequest.only`` (their
(scenario, world) pairs): the same planning, lanes, spare processes,
reference pool, watchdog, stored-bits check and report files as
``python -m harness validate``. The run directory is
``--rankcheck-run-dir`` or ``runs/pytest-<UTC time>/`` (a subdirectory per
launcher when there are several), the harness's output goes to
``validate.log`` there (and to the terminal without xdist unless ``-q``).
Each item then reports its case's verdict from the report's JSON: ``pass``
passes; ``fail``, ``timeout`` and ``error`` fail with the first mismatch,
the detail, the diagnosis and the failing rank's log tail
(``harness.reports.junit.failure_text``); ``not-available`` is a skip with
the reason; a failing stored-bits check fails its case's item. With ``-x``
the runner starts no new job after the first failure, and the items it did
not run are skipped as not run (pytest stops at the first failing item).

xdist. One harness run serves the whole session: its lanes already spread
the cases over the cores, while one runner per worker would start a
reference pool and spares each and split the cores between runners that
cannot see each other. Every worker collects the same items (xdist checks
that), so each knows the whole selection. The controller gives every worker
the same run directory (``pytest_configure_node``); the first worker to
take the lock ``pytest-<testrunuid>.lock`` there runs the selection and
writes ``pytest-<testrunuid>.json`` (where each launcher's report is, its
exit code) before letting go; the others wait on the lock and read it. The
wait ends when the runner finishes or its process ends (the kernel drops
the lock of a dead process); the runner itself is bounded by the deadlines
of its jobs. A worker that gets the lock and finds the run started but no
results fails its items, naming the log, instead of running them again.

pytest is a development dependency: the harness never imports this module.
Its imports of the harness happen inside the hooks, once a scenario is
collected, so a pytest session without scenarios (``make test``) loads
nothing of the harness through it.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

LAUNCHER_CHOICES = ("auto", "torchrun", "virtual", "cpu")
SIZE_CHOICES = ("cpu", "gpu", "all")
SCENARIO_SUFFIXES = (".yaml", ".yml")
LOG_NAME = "validate.log"


def _world(text: str) -> int:
    """A ``--rankcheck-world`` value: a whole number >= 1, else an argparse error saying so."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's options, mirroring ``validate``'s ``--launcher``, ``--world``, ``--size`` and ``--run-dir``."""
    group = parser.getgroup("rankcheck", "rankcheck scenarios (harness.pytest_plugin)")
    group.addoption("--rankcheck-launcher", action="append", choices=LAUNCHER_CHOICES, metavar="NAME",
                    help="launcher of the scenario items: auto, torchrun, virtual or cpu; repeat for several "
                         "(each item then ends in [NAME]); default auto, chosen from the GPUs present")
    group.addoption("--rankcheck-world", action="append", type=_world, metavar="N",
                    help="only the items at this world (repeatable); default every world a scenario lists")
    group.addoption("--rankcheck-size", choices=SIZE_CHOICES, metavar="SIZE",
                    help="size class run (cpu, gpu or all); the items of other sizes are skipped; default cpu "
                         "without a GPU, all with one")
    group.addoption("--rankcheck-run-dir", metavar="DIR",
                    help="the harness's run directory (reports, logs); default runs/pytest-<UTC time>/")
    group.addoption("--rankcheck-scenario-root", action="append", metavar="DIR",
                    help="also collect the scenario files DIR/<family>/*.yaml (repeatable)")


@dataclass
class _Plugin:
    """What one pytest process knows of the scenarios: the roots it collects, launchers, run directory, results."""

    roots: list[Path]
    launchers: list[str] | None = None  # resolved (auto replaced by the launcher it picks), at the first file
    gpus: int = 0
    run_dir: Path | None = None
    # (launcher, family/name, world) -> {"result": CaseResult | None, "checks": [stored-bits CaseResult]}
    verdicts: dict = field(default_factory=dict)
    # launcher -> why its items have no verdict ("" when they ran), and the log/report each item names
    missing: dict = field(default_factory=dict)
    places: dict = field(default_factory=dict)


_STATE = pytest.StashKey[_Plugin]()


def _default_root() -> Path:
    """The repository's ``scenarios/`` package directory (found without importing it)."""
    return Path(__file__).resolve().parent.parent / "scenarios"


def _asked_roots(config: pytest.Config) -> list[Path]:
    """The scenario roots whose files this session collects (the module docstring says which)."""
    roots = [Path(r).resolve() for r in config.getoption("rankcheck_scenario_root") or []]
    default = _default_root().resolve()
    for arg in config.args:
        path = (Path(config.invocation_params.dir) / arg.split("::")[0]).resolve()
        if (path == default or default in path.parents) and default not in roots:
            roots.append(default)
    return roots


def pytest_configure(config: pytest.Config) -> None:
    """Note the scenario roots this session collects."""
    config.stash[_STATE] = _Plugin(roots=_asked_roots(config))


def _state(config: pytest.Config) -> _Plugin:
    """This process's plugin state."""
    return config.stash[_STATE]


def run_dir_of(config: pytest.Config) -> Path:
    """The session's run directory: the option, the controller's (xdist worker), or ``runs/pytest-<UTC time>``."""
    state = _state(config)
    if state.run_dir is None:
        chosen = config.getoption("rankcheck_run_dir")
        given = getattr(config, "workerinput", {}).get("rankcheck_run_dir")
        if given:  # the controller's, resolved from its own directory
            state.run_dir = Path(given)
        elif chosen:
            state.run_dir = (Path(config.invocation_params.dir) / chosen).resolve()
        else:
            from harness.wire.case_files import default_run_dir  # noqa: PLC0415 - the harness loads only for scenarios

            default = default_run_dir()
            state.run_dir = default.with_name(f"pytest-{default.name}")
    return state.run_dir


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: every worker gets the same run directory (one harness run serves them all)."""
    if _state(node.config).roots:
        node.workerinput["rankcheck_run_dir"] = str(run_dir_of(node.config))


def pytest_report_header(config: pytest.Config) -> list[str]:
    """A header line naming where the harness writes, when scenarios are collected."""
    if not _state(config).roots or hasattr(config, "workerinput"):
        return []
    return [f"rankcheck: scenario items run through the harness; run dir {run_dir_of(config)} "
            f"(output in {LOG_NAME} there)"]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """A scenario file under a collected root becomes a ``ScenarioFile``."""
    state = _state(parent.config)
    if file_path.suffix not in SCENARIO_SUFFIXES or not state.roots:
        return None
    if file_path.resolve().parent.parent not in state.roots:
        return None
    return ScenarioFile.from_parent(parent, path=file_path)


def _resolve_launchers(config: pytest.Config, state: _Plugin) -> list[str]:
    """The launchers asked for, ``auto`` resolved as validate resolves it, each once."""
    if state.launchers is None:
        from harness.launch.launchers import gpu_count, resolve  # noqa: PLC0415 - imports torch: only for scenarios

        state.gpus = gpu_count()
        names = config.getoption("rankcheck_launcher") or ["auto"]
        state.launchers = list(dict.fromkeys(resolve(name, state.gpus)[0] for name in names))
    return state.launchers


class ScenarioFile(pytest.File):
    """One scenario file: an item per (world, launcher)."""

    def collect(self):
        """The file's items; a file that does not validate is a collection error naming the file and field."""
        from harness.families.catalog import case_of, load  # noqa: PLC0415 - imports torch: only for scenarios
        from harness.validate import size_class  # noqa: PLC0415 - imports torch: only for scenarios

        try:
            case = case_of(load(self.path))
        except ValueError as exc:
            raise self.CollectError(f"{self.path}: {exc}") from exc
        state = _state(self.config)
        launchers = _resolve_launchers(self.config, state)
        worlds = self.config.getoption("rankcheck_world")
        for world in case.worlds:
            if worlds and world not in worlds:
                continue
            for launcher in launchers:
                size = size_class(self.config.getoption("rankcheck_size"), launcher, state.gpus)
                name = f"world={world}" + (f"[{launcher}]" if len(launchers) > 1 else "")
                item = ScenarioItem.from_parent(self, name=name, case=case, world=world, launcher=launcher,
                                                root=self.path.resolve().parent.parent)
                if size != "all" and case.size != size:
                    item.add_marker(pytest.mark.skip(reason=(
                        f"{case.key} is size {case.size}, outside the size class {size} "
                        f"(--rankcheck-size all runs it here)")))
                yield item


class ScenarioItem(pytest.Item):
    """One scenario at one world under one launcher; its verdict comes from the session's harness run."""

    def __init__(self, *, case: Any, world: int, launcher: str, root: Path, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from harness.families.selection import case_words  # noqa: PLC0415 - imports torch: only for scenarios

        self.case = case
        self.world = world
        self.launcher = launcher
        self.root = root
        self.extra_keyword_matches.update(case_words(case, world, launcher))

    def runtest(self) -> None:
        """Report the case's verdict: pass, a failure with the harness's text, or a skip with the reason."""
        state = _state(self.config)
        verdict = state.verdicts.get((self.launcher, self.case.key, self.world))
        where = state.places.get((self.launcher, self.root), "")
        if verdict is None or verdict["result"] is None:
            why = state.missing.get((self.launcher, self.root)) or "the harness reported no verdict for this case"
            if why.startswith("not run"):
                pytest.skip(why)
            pytest.fail(f"{why}{where}", pytrace=False)
        failure = verdict_failure(verdict["result"], verdict["checks"])
        if failure:
            pytest.fail(failure + where, pytrace=False)
        if verdict["result"].status == "not-available":
            pytest.skip(f"not available: {verdict['result'].detail}")

    def reportinfo(self):
        """Where the item is: its file (line 0: pytest places a skip marker's report there), and the case in words."""
        return self.path, 0, f"{self.case.key} at world {self.world} ({self.launcher})"


def verdict_failure(result: Any, checks: list) -> str:
    """The failure text of a case whose verdict or stored-bits check failed ("" when neither did)."""
    from harness.reports.junit import failure_text  # noqa: PLC0415 - imports torch: only for scenarios
    from harness.wire.case_result import FAILING  # noqa: PLC0415 - the harness loads only for scenarios

    if result.status in FAILING:
        first = result.first_mismatch or (result.diagnosis or {}).get("text") or result.detail
        return f"{result.status.upper()} {result.case_id}: {first}\n{failure_text(result)}"
    failed = [c for c in checks if c.status in FAILING]
    if failed:
        return f"STORED BITS {failed[0].case_id}: {failed[0].detail}"
    return ""


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Run the selected scenario items through the harness once, before pytest runs (reports) them."""
    config = session.config
    if config.option.collectonly or (session.testsfailed and not config.option.continue_on_collection_errors):
        return
    items = [i for i in session.items if isinstance(i, ScenarioItem) and i.get_closest_marker("skip") is None]
    if not items:
        return
    state = _state(config)
    token = getattr(config, "workerinput", {}).get("testrunuid")
    runs = _run_or_wait(session, items, token) if token else run_selection(session, items)
    read_verdicts(state, runs)
    if runs.get("interrupted"):
        raise KeyboardInterrupt("the harness run of the scenario items was interrupted")


def _groups(items: list) -> dict:
    """(launcher, root) -> the (family/name, world) pairs of the items run there."""
    groups: dict = {}
    for item in items:
        groups.setdefault((item.launcher, item.root), set()).add((item.case.key, item.world))
    return groups


def run_selection(session: pytest.Session, items: list) -> dict:
    """Run the items' cases through ``run_validate``, one run per (launcher, root); return where each report is."""
    from harness.validate import ValidateRequest, run_validate  # noqa: PLC0415 - imports torch: only for scenarios
    from harness.wire.case_result import EXIT_FAILED, EXIT_INTERRUPTED  # noqa: PLC0415 - only for scenarios

    config = session.config
    base = run_dir_of(config)
    groups = _groups(items)
    exitfirst = config.option.maxfail == 1  # -x is --maxfail 1
    runs: dict = {"runs": [], "interrupted": False}
    stopped = ""
    for index, ((launcher, root), pairs) in enumerate(sorted(groups.items(), key=lambda kv: str(kv[0]))):
        run_dir = base if len(groups) == 1 else base / f"{launcher}-{index}"
        entry = {"launcher": launcher, "root": str(root), "run_dir": str(run_dir), "report": "", "exit_code": None,
                 "missing": stopped}
        runs["runs"].append(entry)
        if stopped:
            continue
        run_dir.mkdir(parents=True, exist_ok=True)
        request = ValidateRequest(launcher=launcher, size=config.getoption("rankcheck_size"), run_dir=str(run_dir),
                                  scenario_root=None if root == _default_root().resolve() else str(root),
                                  only=sorted(pairs), exitfirst=exitfirst)
        with _HarnessOutput(config, run_dir / LOG_NAME) as stream, _InterruptHandlers():
            try:
                entry["exit_code"] = run_validate(request, stream=stream)
            except ValueError as exc:
                entry["missing"] = f"the harness refused the selection: {exc}"
                continue
        entry["report"] = str(run_dir / "report.json")
        if entry["exit_code"] == EXIT_INTERRUPTED:
            runs["interrupted"] = True
            break
        if exitfirst and entry["exit_code"] == EXIT_FAILED:
            entry["missing"] = stopped = "not run: -x stopped the harness after the first failure"
    return runs


class _HarnessOutput:
    """The stream the harness writes to: ``validate.log``, and the terminal too without xdist unless ``-q``."""

    def __init__(self, config: pytest.Config, log_path: Path) -> None:
        self.log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in __exit__
        self.echo = not hasattr(config, "workerinput") and config.option.verbose >= 0

    def __enter__(self) -> "_HarnessOutput":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.log.close()

    def write(self, text: str) -> int:
        """Write ``text`` to the log (and the terminal)."""
        if self.echo:
            sys.stdout.write(text)
        return self.log.write(text)

    def flush(self) -> None:
        """Flush the log (and the terminal)."""
        self.log.flush()
        if self.echo:
            sys.stdout.flush()

    def isatty(self) -> bool:
        """Never a terminal: the harness writes plain lines, no live table."""
        return False


class _InterruptHandlers:
    """The harness's SIGINT/SIGTERM handlers (end every process tree, then KeyboardInterrupt) during a run, in the
    main thread only (where signals are delivered); the previous handlers afterwards."""

    def __enter__(self) -> "_InterruptHandlers":
        from harness.launch.supervision import install_interrupt_handlers  # noqa: PLC0415 - only for scenarios

        self.saved = {}
        if threading.current_thread() is threading.main_thread():
            self.saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
            install_interrupt_handlers()
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


def _run_or_wait(session: pytest.Session, items: list, token: str) -> dict:
    """xdist worker: run the selection if no other worker has, else wait for its results (module docstring)."""
    run_dir = run_dir_of(session.config)
    run_dir.mkdir(parents=True, exist_ok=True)
    results = run_dir / f"pytest-{token}.json"
    started = run_dir / f"pytest-{token}.started"
    with open(run_dir / f"pytest-{token}.lock", "a") as lock:
        # held by the runner for its whole run; the kernel drops it when the runner's process ends
        fcntl.flock(lock, fcntl.LOCK_EX)
        if results.exists():
            return json.loads(results.read_text(encoding="utf-8"))
        if started.exists():
            why = f"the xdist worker running the harness ended before writing {results.name}; see {LOG_NAME}"
            return {"runs": [{"launcher": launcher, "root": str(root), "run_dir": str(run_dir), "report": "",
                              "exit_code": None, "missing": why} for launcher, root in _groups(items)],
                    "interrupted": False}
        started.write_text(f"{os.getpid()} {time.time()}\n", encoding="utf-8")
        runs = run_selection(session, items)
        temporary = results.with_suffix(".tmp")
        temporary.write_text(json.dumps(runs, indent=1), encoding="utf-8")
        os.replace(temporary, results)
        return runs


def read_verdicts(state: _Plugin, runs: dict) -> None:
    """Fill ``state.verdicts`` from each run's JSON report (cases, and the stored-bits checks of each case)."""
    from harness.wire.case_result import CaseResult  # noqa: PLC0415 - the harness loads only for scenarios

    known = set(CaseResult.__dataclass_fields__)
    for run in runs["runs"]:
        key = (run["launcher"], Path(run["root"]))
        state.places[key] = f"\n(harness output: {Path(run['run_dir']) / LOG_NAME}; report: {run['report'] or '-'})"
        if run["missing"]:
            state.missing[key] = run["missing"]
        if not run["report"] or not Path(run["report"]).exists():
            state.missing.setdefault(key, f"the harness wrote no report (exit code {run['exit_code']})")
            continue
        for doc in json.loads(Path(run["report"]).read_text(encoding="utf-8"))["results"]:
            result = CaseResult(**{k: v for k, v in doc.items() if k in known})
            name = result.scenario.removesuffix(":stored-bits") if result.is_stored_bits_check else result.scenario
            slot = state.verdicts.setdefault((run["launcher"], f"{result.family}/{name}", result.world),
                                             {"result": None, "checks": []})
            if result.is_stored_bits_check:
                slot["checks"].append(result)
            else:
                slot["result"] = result
