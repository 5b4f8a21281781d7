"""Report files get the umask's mode, as a plain ``open`` would give them: others read them on shared paths."""

import io
import os
import stat

import pytest

from harness.reports.report import Report
from harness.wire.atomic_file import atomic_write, current_umask
from harness.wire.case_result import CaseResult


@pytest.fixture
def umask_022():
    """Set the umask to 022 for the test and restore the caller's afterwards."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path) -> int:
    """The permission bits of ``path``."""
    return stat.S_IMODE(os.stat(path).st_mode)


def test_current_umask_reads_the_process_umask(umask_022):
    assert current_umask() == 0o022


def test_atomic_write_gives_the_umask_mode_not_0600(tmp_path, umask_022):
    atomic_write(tmp_path / "x.json", "{}")
    assert mode(tmp_path / "x.json") == 0o644


def test_report_files_are_readable_by_others_under_umask_022(tmp_path, umask_022):
    junit, js = tmp_path / "r.xml", tmp_path / "r.json"
    with Report(header="h", junit_path=junit, json_path=js, stream=io.StringIO(), live=False) as report:
        report.add(CaseResult("markov_sharded", "s", 2, "cpu", "pass"))
    assert mode(junit) == mode(js) == 0o644


def test_a_stricter_umask_is_kept(tmp_path):
    previous = os.umask(0o077)
    try:
        atomic_write(tmp_path / "x.json", "{}")
    finally:
        os.umask(previous)
    assert mode(tmp_path / "x.json") == 0o600
