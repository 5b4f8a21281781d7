"""Every run ends with a failure summary (case, rank, launch, first mismatch or diagnosis, log) above the footer;
the live table at 80 columns still shows each failing row's detail; plain output is never hard-wrapped."""

import io

from rich.console import Console

from harness.launch.diagnosis import Diagnosis
from harness.reports.failures import failure_summary
from harness.reports.live import LiveView, detail_width, MIN_DETAIL
from harness.reports.report import Report
from harness.wire.case_result import CaseResult

MISMATCH = "rank 1, launch 2, cache[row 0] (element 7): got 0x1 (1.0), expected 0x2 (2.0)"
LOG = "/runs/x/logs/job0/r/attempt_0/1/stderr.log"


def planted() -> list[CaseResult]:
    """A pass, a wrong-bits failure, and a crash whose diagnosis names the rank, launch and log, in that order."""
    crash = Diagnosis(1, 3, None, "rank 1 crashed before launch 3", cause="crash", logs={0: "/r0.log", 1: LOG})
    crash.in_group(1, [2, 3])
    return [CaseResult("markov_sharded", "basic", 2, "cpu", "pass", detail="bits equal"),
            CaseResult("markov_sharded", "nan_logits", 2, "cpu", "fail", mismatch_count=1, first_mismatch=MISMATCH),
            CaseResult("markov_sharded", "basic", 4, "cpu", "error", group=1, diagnosis=crash.to_json(),
                       detail="rank 1: RuntimeError: ended without a result " + "x" * 300)]


def run(results, *, live: bool, width: int = 80) -> str:
    """What a Report prints for ``results`` on a stream of ``width`` columns."""
    stream = io.StringIO()
    stream.isatty = lambda: live
    with Report(header="# h", stream=stream, live=live, total=len(results)) as report:
        if live:
            report._console.width = width
        for r in results:
            report.add(r)
    return stream.getvalue()


def test_the_summary_names_case_rank_launch_first_mismatch_and_log():
    lines = failure_summary(planted()).splitlines()
    assert lines[0].startswith("# Failures : 2")
    crash, wrong = lines[1:]  # errors before wrong bits
    assert "markov_sharded/basic[world=4,launcher=cpu,group=1]" in crash and "rank 1 (global 3)" in crash
    assert "launch 3" in crash and "rank 1 crashed before launch 3" in crash and crash.endswith(f"log {LOG}")
    assert "markov_sharded/nan_logits[world=2,launcher=cpu]" in wrong and "rank 1  launch 2" in wrong
    assert MISMATCH in wrong


def test_nothing_failed_prints_no_summary():
    assert failure_summary(planted()[:1]) == ""
    assert "# Failures" not in run(planted()[:1], live=False)


def test_plain_output_ends_with_the_summary_then_the_footer_unwrapped():
    lines = run(planted(), live=False).splitlines()
    assert lines[-1].startswith("# Result : FAILED")
    at = next(i for i, line in enumerate(lines) if line.startswith("# Failures : 2"))
    assert MISMATCH in lines[at + 2] and LOG in lines[at + 1]
    # the 300-character detail of the crash stays on its one line
    assert any(("x" * 300) in line for line in lines)


def test_a_live_run_at_80_columns_ends_with_the_summary():
    out = run(planted(), live=True, width=80)
    tail = out[out.rindex("# Failures : 2"):]
    assert MISMATCH in tail and "# Result : FAILED" in tail.splitlines()[-1]


def render(view: LiveView) -> str:
    """The view's current drawing as plain text."""
    console = view.console
    with console.capture() as cap:
        console.print(view.renderable())
    return cap.get()


def test_the_live_table_at_80_columns_shows_each_failing_rows_detail_below_it():
    assert detail_width(80) < MIN_DETAIL  # the column cannot fit: the detail must go somewhere else
    console = Console(file=io.StringIO(), width=80, height=40, force_terminal=True, color_system=None)
    view = LiveView(console, total=3)
    view.results = planted()
    text = render(view)
    assert "got 0x1 (1.0), expected 0x2 (2.0)" in text.replace("\n", "")
    assert "fail markov_sharded/nan_logits[world=2,launcher=cpu]" in text.replace("\n", "")
    assert all(len(line) <= 80 for line in text.splitlines())


def test_a_wide_terminal_keeps_the_detail_in_its_column():
    console = Console(file=io.StringIO(), width=220, height=40, force_terminal=True, color_system=None)
    view = LiveView(console, total=3)
    view.results = planted()
    text = render(view)
    row = next(line for line in text.splitlines() if "nan_logits" in line)
    assert "rank 1, launch 2, cache[row 0]" in row
