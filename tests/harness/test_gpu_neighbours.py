"""Who else held the GPU at a job's deadline: the nvidia-smi snapshot, its summary, and the verdict that carries it.

``nvidia-smi`` is replaced by scripts on ``PATH`` (this machine has no GPU):
one that lists the job's worker processes (found in ``/proc`` by the run
directory in their command lines) and one foreign process, one that fails,
one that never answers. The end-to-end test runs the injected hang of
tests/harness/scenarios (rank 1 hangs before launch 1, world 2) on the
virtual launcher, as the hang tests of ``test_hang_evidence.py`` do.
"""

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

from harness.launch import gpu_neighbours
from harness.launch.diagnosis import diagnose
from harness.launch.supervision import Supervised
from test_cpu_launcher import harness, processes_of, report

FOREIGN_PID = 4242

LISTING = f'''#!{sys.executable}
import os, sys
needle = os.environ["FAKE_SMI_NEEDLE"].encode()
for entry in os.listdir("/proc"):
    if not entry.isdigit():
        continue
    try:
        with open(f"/proc/{{entry}}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        continue
    if needle in cmdline and int(entry) != os.getpid():
        print(f"{{entry}}, python3, 812 MiB")
print("{FOREIGN_PID}, other_job, 2048 MiB")
'''


def fake_smi(directory: Path, body: str) -> Path:
    """An executable ``nvidia-smi`` with ``body`` in ``directory``; the directory, to put first on PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "nvidia-smi"
    script.write_text(body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return directory


def on_path(monkeypatch, directory: Path) -> None:
    """Put ``directory`` first on this process's PATH."""
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ.get('PATH', '')}")


def test_the_snapshot_marks_the_jobs_processes_and_the_summary_counts_the_others(tmp_path, monkeypatch):
    own = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", str(tmp_path)])
    try:
        monkeypatch.setenv("FAKE_SMI_NEEDLE", str(tmp_path))
        on_path(monkeypatch, fake_smi(tmp_path / "bin", LISTING))
        path = gpu_neighbours.snapshot([own.pid], tmp_path / "stacks" / "gpu-1.txt")
    finally:
        own.kill()
        own.wait()
    lines = path.read_text().splitlines()
    assert lines[0].startswith("# nvidia-smi compute processes at ") and lines[0].endswith(f"this job's processes: {own.pid}")
    assert f"{own.pid}, python3, 812 MiB, this job" in lines
    assert f"{FOREIGN_PID}, other_job, 2048 MiB" in lines
    said = gpu_neighbours.summary(path)
    assert said == (f"at the deadline the GPU held 1 of this job's processes and 1 other: pid {FOREIGN_PID} "
                    f"(nvidia-smi, {path})")


def test_no_nvidia_smi_a_failing_one_or_a_silent_one_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpu_neighbours.snapshot([1], tmp_path / "a.txt") is None
    on_path(monkeypatch, fake_smi(tmp_path / "failing", "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n"))
    assert gpu_neighbours.snapshot([1], tmp_path / "b.txt") is None
    on_path(monkeypatch, fake_smi(tmp_path / "silent", "#!/bin/sh\nexec sleep 30\n"))
    monkeypatch.setattr(gpu_neighbours, "QUERY_TIMEOUT_S", 0.5)
    started = time.monotonic()
    assert gpu_neighbours.snapshot([1], tmp_path / "c.txt") is None
    assert time.monotonic() - started < 10, "a driver that does not answer must not hold the deadline"
    assert not any((tmp_path / name).exists() for name in ("a.txt", "b.txt", "c.txt"))
    assert gpu_neighbours.summary(None) is None


def test_an_empty_listing_is_said_as_such(tmp_path):
    path = tmp_path / "gpu-7.txt"
    path.write_text("# nvidia-smi compute processes at 2026-12-07T03:23:41Z; this job's processes: 7\n")
    assert gpu_neighbours.summary(path) == f"nvidia-smi listed no compute process at the deadline ({path})"


def test_an_expired_tree_keeps_the_snapshot_and_a_finished_one_takes_none(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_SMI_NEEDLE", str(tmp_path / "marker"))
    on_path(monkeypatch, fake_smi(tmp_path / "bin", LISTING))
    stacks = tmp_path / "stacks"
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path / "marker")]
    tree = Supervised(sleeper, stacks_dir=stacks)
    expired = tree.wait(0.5)
    assert expired.timed_out and expired.gpu_processes == str(gpu_neighbours.snapshot_path(stacks, tree.proc.pid))
    assert Path(expired.gpu_processes).read_text().count(", this job") == 1
    finished = Supervised([sys.executable, "-c", "pass"], stacks_dir=stacks).wait(30)
    assert not finished.timed_out and finished.gpu_processes is None


def test_the_diagnosis_of_a_virtual_hang_names_who_else_held_the_gpu(tmp_path):
    bin_dir = fake_smi(tmp_path / "bin", LISTING)
    run_dir = tmp_path / "run"
    proc = harness("validate", "--launcher", "virtual", "--impl", "golden", "--scenario", "tiny_hang",
                   run_dir=run_dir, env={"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                                         "FAKE_SMI_NEEDLE": str(run_dir)})
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the scenario expects this timeout
    (res,) = report(run_dir)["results"]
    said = res["diagnosis"]["gpu_processes"]
    assert said.startswith("at the deadline the GPU held 1 of this job's processes and ") and f"pid {FOREIGN_PID}" in said
    assert said in res["detail"]
    snapshots = list((run_dir / "stacks").glob("gpu-*.txt"))
    assert len(snapshots) == 1 and str(snapshots[0]) in said
    assert processes_of(run_dir) == []


def test_a_diagnosis_without_a_snapshot_says_nothing_of_the_gpu():
    progress = {0: [{"event": "begin", "launch": 0, "params": {}, "state": {}}]}
    assert diagnose(progress).gpu_processes is None
    assert diagnose(progress, gpu_processes="at the deadline ...").gpu_processes == "at the deadline ..."
