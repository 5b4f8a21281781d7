"""CPU tests of ``python -m harness bench`` around the GPU work: the default set and its time budget, selection
errors, exit codes (nothing selected, no GPU, failures, interrupts by SIGINT and SIGTERM), the document kept on
disk after every case, and each case's line printed as it completes.

The GPU part (``runner.run_cases``) is replaced by the real case loop (``runner.run_loop``) over entries from
``bench_documents``, so everything else runs as on the GPU machine."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys

import pytest
from bench_documents import ROOT, STORED_RUN, entry

import harness.bench.runner as runner
from harness.bench import budget, main, select
from harness.bench.console import LiveConsole
from harness.bench.registry import REGISTRY, BenchCase, discover
from harness.bench.results import ResultsWriter
from harness.bench.runner import run_loop

BASELINE_KEYS = ["baseline/copy_64k", "baseline/copy_4m", "baseline/copy_64m"]


@pytest.fixture(scope="module", autouse=True)
def registered():
    """Every case module imported (discovery must not fail)."""
    assert discover() == []


def _document(cases) -> dict:
    """A results document at the start of a run over ``cases``, as ``run_cases`` builds it."""
    return {
        "schema": "rankcheck-bench/1", "command": ["python", "-m", "harness", "bench"],
        "date": "2026-11-30T11:00:00+00:00", "device": {"name": "NVIDIA H200", "capability": "9.0"},
        "versions": {"torch": "x"}, "settings": {"warmup": 3, "reps": 20},
        "machine": {"copy_bandwidth_bytes_per_s": 4e12, "graph_launch_us": 0.5, "eager_launch_us": 5.0},
        "status": "running", "selected": [c.key for c in cases], "cases": [], "failed": [],
    }


def _measured(case: BenchCase) -> dict:
    """A results entry for ``case`` with a median of its own."""
    return entry(case.family, case.name, dict(case.params), 3.0 + len(case.name), 9.0 + len(case.name), 2.0) | {
        "setup_s": 0.25, "timed_s": 1.5}


def _fake_gpu(monkeypatch, measure=_measured):
    """Pretend a GPU is present and let ``run_cases`` be the real case loop over ``measure``."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def run_cases(cases, *, command, warmup, reps, failed, listeners):
        """The runner's loop with ``measure`` instead of the GPU."""
        return run_loop(_document(cases) | {"command": list(command), "failed": list(failed)}, cases, measure,
                        lambda: None, listeners)

    monkeypatch.setattr(runner, "run_cases", run_cases)


def test_default_set_is_a_subset_and_all_reaches_every_case():
    default, _ = select(None, None, everything=False)
    everything, _ = select(None, None, everything=True)
    assert 0 < len(default) < len(everything) == len(REGISTRY.cases())
    assert {c.family for c in default} == {c.family for c in everything}
    hidden = [c for c in everything if not c.default]
    assert hidden and all(c.family == "allreduce_mhc" or c.launcher == "torchrun"
                          or c.params.get("flight_recorder") is False
                          or (c.family == "markov_fused" and c.params.get("virtual_ranks") is True) for c in hidden)
    # An explicit --case reaches a case outside the default set, by name or by family/name.
    assert select(None, hidden[0].name, everything=False)[0] == [hidden[0]]
    assert select(None, hidden[0].key, everything=False)[0] == [hidden[0]]


def test_default_set_fits_the_budget_estimated_from_the_stored_run():
    with open(STORED_RUN) as fh:
        stored = {f"{c['family']}/{c['name']}": c for c in json.load(fh)["cases"]}
    default, _ = select(None, None, everything=False)

    def timing(case):
        """The stored entry of ``case``, or of its twin with the flight recorder (the same kernel's timing)."""
        twin = case.params.get("flight_cost_of")
        return stored.get(case.key) or (stored.get(f"{case.family}/{twin}") if twin else None)

    missing = [c.key for c in default if timing(c) is None]
    assert not missing, f"no stored timing for {missing}: the budget cannot be checked"
    estimate = budget.run_seconds([timing(c) for c in default], warmup=budget.DEFAULT_WARMUP, reps=budget.DEFAULT_REPS)
    assert estimate <= 0.8 * budget.BUDGET_S, f"default set estimated at {estimate:.0f} s"
    # The model reproduces the stored run's own wall time (193 s for all 78 cases at warm-up 3, 20 reps).
    assert budget.run_seconds(stored.values(), warmup=3, reps=20) == pytest.approx(193, rel=0.05)
    assert budget.run_seconds(stored.values(), warmup=20, reps=100) > budget.BUDGET_S


def test_nothing_selected_exits_2_with_why(capsys):
    assert main(["--family", "allreduce"]) == 2
    assert "no family 'allreduce'" in capsys.readouterr().err
    assert main(["--case", "tp2_h5120_m1_lx"]) == 2
    err = capsys.readouterr().err
    assert "no case 'tp2_h5120_m1_lx'" in err and "did you mean tp2_h5120_m1_ll" in err
    assert main(["--list", "--family", "markov_fused", "--case", "baseline/copy_4m"]) == 2
    assert "name different families" in capsys.readouterr().err


def test_list_marks_the_default_set(capsys):
    assert main(["--list", "--all", "--family", "allreduce_mhc"]) == 0
    marks = {line.split("\t")[0]: line.split("\t")[1] for line in capsys.readouterr().out.splitlines()}
    assert marks["allreduce_mhc/tp2_h5120_m1_ll"] == "default"
    assert marks["allreduce_mhc/tp2_h5120_m16_ll"] == "--all"


def test_no_gpu_exits_2_with_the_reason(capsys, monkeypatch, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--family", "baseline", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "nothing was run of the 3 selected cases" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("failing, status", [(None, 0), ("copy_4m", 1)])
def test_complete_run_writes_results_summary_and_says_so(monkeypatch, tmp_path, capsys, failing, status):
    def measure(case):
        """The fake measurement; ``failing`` raises as a broken case would."""
        if case.name == failing:
            raise RuntimeError("sanity check failed")
        return _measured(case)

    _fake_gpu(monkeypatch, measure)
    assert main(["--family", "baseline", "--out", str(tmp_path)]) == status
    out = capsys.readouterr().out
    [stored] = list(tmp_path.glob("bench-*[0-9]Z.json"))
    document = json.loads(stored.read_text())
    assert document["status"] == "complete" and document["selected"] == BASELINE_KEYS
    assert stored.with_suffix(".md").read_text() in out
    if failing:
        assert "FAILED baseline/copy_4m: RuntimeError: sanity check failed" in out
        assert re.search(r"bench: 2 of 3 cases measured in \d+ s, 1 failed", out)
    else:
        assert re.search(r"bench: 3 of 3 cases measured in \d+ s, 0 failed", out)
    assert document["wall_s"] >= 0


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_exits_130_and_keeps_what_finished(monkeypatch, tmp_path, capsys, signum):
    def measure(case):
        """Measure the first case; the second is interrupted by a signal to this process."""
        if case.name == "copy_4m":
            os.kill(os.getpid(), signum)
        return _measured(case)

    _fake_gpu(monkeypatch, measure)
    previous = signal.getsignal(signum)
    assert main(["--family", "baseline", "--out", str(tmp_path)]) == 130
    assert signal.getsignal(signum) is previous, "the bench's handler must not outlive the run"
    out = capsys.readouterr().out
    assert "bench: INTERRUPTED (1 of 3 run)" in out
    [stored] = list(tmp_path.glob("bench-*[0-9]Z.json"))
    document = json.loads(stored.read_text())
    assert document["status"] == "interrupted"
    assert [c["name"] for c in document["cases"]] == ["copy_64k"]
    assert document["not_run"] == ["baseline/copy_4m", "baseline/copy_64m"]
    assert "status: interrupted" in stored.with_suffix(".md").read_text()


def test_interrupt_before_the_first_case_exits_130(monkeypatch, tmp_path, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def run_cases(cases, **_):
        """Interrupted while measuring the machine."""
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_cases", run_cases)
    assert main(["--family", "baseline", "--out", str(tmp_path)]) == 130
    assert "INTERRUPTED before any case was measured (0 of 3)" in capsys.readouterr().err


def test_an_interrupt_between_torchrun_cases_keeps_what_they_measured(monkeypatch, tmp_path, capsys):
    import harness.bench.torchrun as torchrun

    first, second = "allreduce_mhc/torchrun_tp2_h5120_m1", "allreduce_mhc/torchrun_tp2_h5120_m8"

    def run_case(case, **_):
        """The first case measured (as rank 0 reports it), an interrupt in the second."""
        if case.key == second:
            raise KeyboardInterrupt
        figures = _document([case])
        return torchrun.Spawned(entries=[_measured(case)], device=figures["device"], machine=figures["machine"])

    monkeypatch.setattr(torchrun, "run_case", run_case)
    assert main(["--case", f"{first},{second}", "--out", str(tmp_path)]) == 130
    assert "bench: INTERRUPTED (1 of 2 run)" in capsys.readouterr().out
    [stored] = list(tmp_path.glob("bench-*[0-9]Z.json"))
    document = json.loads(stored.read_text())
    assert document["status"] == "interrupted" and document["not_run"] == [second]
    assert [f"{c['family']}/{c['name']}" for c in document["cases"]] == [first]


def test_run_loop_keeps_the_document_on_disk_after_every_case(tmp_path):
    cases = REGISTRY.cases(family="baseline")
    on_disk = []

    class ReadBack:
        """A listener after the writer: what the file holds when each case has finished."""

        machine_measured = case_started = staticmethod(lambda *args: None)

        def case_finished(self, document, case, entry, failed):
            """Record the names stored on disk at this moment."""
            stored = json.loads(open(writer.path).read())
            on_disk.append(([c["name"] for c in stored["cases"]], [f["case"] for f in stored["failed"]]))

    def measure(case):
        """The middle case fails; the others are measured."""
        if case.name == "copy_4m":
            raise ValueError("broken")
        return _measured(case)

    writer = ResultsWriter(str(tmp_path))
    document = run_loop(_document(cases), cases, measure, lambda: None, (writer, ReadBack()))
    assert on_disk == [(["copy_64k"], []), (["copy_64k"], ["baseline/copy_4m"]),
                       (["copy_64k", "copy_64m"], ["baseline/copy_4m"])]
    assert document["status"] == "complete" and "not_run" not in document


def test_run_loop_stops_when_the_context_is_lost():
    cases = REGISTRY.cases(family="baseline")
    settled = []

    def settle():
        """The first case's trap kills the context."""
        settled.append(1)
        raise RuntimeError("CUDA error: an illegal instruction was encountered")

    document = run_loop(_document(cases), cases, _measured, settle)
    assert len(settled) == 1 and document["status"] == "aborted"
    assert document["not_run"] == ["baseline/copy_4m", "baseline/copy_64m"]
    assert document["failed"][0]["error"].startswith("CUDA context lost: RuntimeError")


def test_each_case_line_is_printed_as_it_completes():
    cases = REGISTRY.cases(family="markov_fused")[:2]
    kernel, loop = cases
    assert loop.name == kernel.params["baseline"]
    for terminal in (False, True):
        out = io.StringIO()
        document = _document(cases)
        with LiveConsole(len(cases), file=out, terminal=terminal) as live:
            live.machine_measured(document)
            for case in cases:
                live.case_started(document, case)
                document["cases"].append(_measured(case))
                live.case_finished(document, case, document["cases"][-1], False)
                assert case.key in out.getvalue(), "the line must be out before the next case starts"
        text = out.getvalue()
        graph = document["cases"][0]["graph"]["median_us"]
        assert f"[1/2] {kernel.key}" in text and f"graph {graph:9.2f} us" in text
        assert f"x floor {graph / 2.0:6.2f}" in text
        assert "(0.2 s setup, 1.5 s timed)" in text
        # The loop ran after the kernel: its speedup over the kernel's baseline is known only afterwards.
        assert "x vs" not in text.split(loop.key)[0]


def test_a_second_signal_ends_the_process_with_130():
    code = (
        "import os, signal, time\n"
        "from harness.bench import interrupts_raise\n"
        "with interrupts_raise():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(30)\n"
        "    except KeyboardInterrupt:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(30)\n"
        "print('survived both signals')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 130, done.stderr
    assert "survived" not in done.stdout
