"""A test whose kernel ends in a device trap runs it in a child process (the trap kills the CUDA context).

Both halves live here. The parent's ``run_child`` is the one runner of every trapping child: it starts the script,
waits for its JSON result (written whole by the child's ``write_result``: a temporary file renamed into place) or
its exit, whichever comes first, and never waits past a deadline. A child that wrote its result and then does
not exit is a process stuck in the driver's teardown of a trapped context (seen on one GPU shared with other
test processes: the record was printed and the process then ignored even a SIGUSR1 stack dump); its result still
stands, the stall is returned beside it (``exit_stall``: every thread's kernel state and wait channel) for the
test to report, and the process is killed. A child that wrote nothing by the deadline gives ``missing`` with the
same evidence. ``run_script`` runs a child that reports by its exit and output instead, under a deadline with
the same evidence. ``trapped_report`` runs one child and returns the diagnostic record it dumped; the child's
``dump_rank0_and_exit`` runs two virtual ranks and writes rank 0's result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
if ROOT not in sys.path:  # a child script imports this module with only its own folder on the path
    sys.path.insert(0, ROOT)

from tests.process_states import task_states as thread_states  # noqa: E402


# Hang guards, not timing bounds: a child compiles its kernels and traps within a minute on an idle GPU, and a
# process that wrote its result exits at once unless the driver holds it.
CHILD_DEADLINE_S = 300
# Every trapping child leaves with ``os._exit`` right after writing its result: one still there after
# ``EXIT_GRACE_S`` is held by the driver, and waiting longer only holds its test up. ``KILL_WAIT_S``: how long a
# killed child may take to go before the runner says so and moves on (``tests/leftover_processes.py`` still waits
# for it at the session's end).
EXIT_GRACE_S = 15
KILL_WAIT_S = 60
# How long a child waits for its own stream after the launches (every kernel in these children has a deadline of
# at most a few seconds), and how often it looks.
STREAM_DEADLINE_S = 60
POLL_S = 0.01


def child_env(**extra: str) -> dict:
    """This process's environment with the repository on ``PYTHONPATH`` (and ``extra``), for a child script."""
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}


def write_result(path: str, result) -> None:
    """Write ``result`` as JSON to ``path`` whole: a temporary file beside it, renamed into place."""
    partial = f"{path}.partial"
    with open(partial, "w") as fh:
        json.dump(result, fh)
    os.replace(partial, path)


def task_states(pid: int) -> str:
    """Each thread of ``pid``: its kernel state letter and wait channel, a line each (``tests.process_states``)."""
    lines = [f"thread {task}: state {state}, waits in {wchan}" for task, state, wchan in thread_states(pid)]
    return "\n".join(lines) or f"no /proc entry for {pid} (it has exited)"


def _stop(proc: subprocess.Popen) -> str:
    """Where a child that did not exit is stuck (thread states, then its SIGUSR1 stack dump if it has one), after
    which it is killed and reaped; that evidence with what it printed."""
    states = task_states(proc.pid)
    proc.send_signal(signal.SIGUSR1)
    try:
        stdout, stderr = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            stdout, stderr = proc.communicate(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:  # still held by the driver: say so rather than wait on it forever
            stdout, stderr = "", f"pid {proc.pid} did not end after SIGKILL within {KILL_WAIT_S} s"
    return f"{states}\nstdout: {stdout[-3000:]}\nstderr: {stderr[-6000:]}"


def run_child(args: list[str], dump, env: dict | None = None, deadline_s: float = CHILD_DEADLINE_S,
              exit_grace_s: float = EXIT_GRACE_S) -> dict:
    """Run the child ``args`` (its last argument names ``dump``) until it exits or its result is written; its JSON
    result (with ``exit_stall`` when it had to be killed after writing it), or ``{"missing": evidence}``."""
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env or child_env())
    started, stall, printed = time.monotonic(), None, ""
    while True:
        try:
            stdout, stderr = proc.communicate(timeout=1)
            printed = f"rc={proc.returncode}\n{stdout[-3000:]}\n{stderr[-3000:]}"
            break
        except subprocess.TimeoutExpired:
            pass
        waited = time.monotonic() - started
        if os.path.exists(dump) and waited > exit_grace_s:
            stall = _stop(proc)
            break
        if waited > deadline_s:
            return {"missing": f"still running after {deadline_s:.0f} s:\n{_stop(proc)}"}
    if not os.path.exists(dump):
        return {"missing": printed}
    with open(dump) as fh:
        result = json.load(fh)
    if stall is not None:
        warnings.warn(f"{os.path.basename(args[0])} wrote its result and then did not exit (the driver's teardown "
                      f"of its trapped context); killed:\n{stall}")
        result["exit_stall"] = stall
    return result


def run_script(args: list[str], deadline_s: float) -> subprocess.CompletedProcess:
    """Run the script ``args`` to its end, output captured, on the tests' environment (``child_env``, up to 32 CUDA
    connections unless set); past ``deadline_s`` it is killed and the test fails saying where it was stuck."""
    import pytest  # noqa: PLC0415 - only the parent side fails tests; a child imports this module too

    env = child_env(CUDA_DEVICE_MAX_CONNECTIONS=os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "32"))
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        stdout, stderr = proc.communicate(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(args)} still running after {deadline_s:.0f} s (killed):\n{_stop(proc)}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def trapped_report(script: str, dump) -> tuple[dict, dict]:
    """Run ``script`` (a file of tests/kernels) with ``dump`` as its argument, assert it wrote a result whose launch
    failed with a diagnostic record, and return (the result, the record)."""
    result = run_child([os.path.join(HERE, script), str(dump)], dump)
    assert "missing" not in result, f"child wrote no result: {result['missing']}"
    assert result["launch_failed"], result
    assert result["report"] is not None, result
    return result, result["report"]


def launch_failed(deadline_s: float = STREAM_DEADLINE_S) -> bool | str:
    """Whether the current stream's work failed: True when querying it raises (a trapped kernel's error surfaces
    there), False when it finished cleanly, a sentence (truthy) when it is still busy after ``deadline_s``.

    Polled rather than synchronized: on one GPU shared with other test processes, a kernel was seen to print its
    diagnosis and trap while the host's ``synchronize`` of its stream never returned (300 s, the thread running in
    the driver). The kernel's own record (``report_json``) says whether it ended at its deadline; this wait only
    keeps a stall in the driver from becoming a hang of the child.
    """
    import torch

    stream = torch.cuda.current_stream()
    started = time.monotonic()
    while True:
        try:
            if stream.query():
                return False
        except RuntimeError:
            return True
        waited = time.monotonic() - started
        if waited > deadline_s:
            return (f"the stream was still busy {waited:.0f} s after the host began waiting: the driver did not "
                    f"report the launch's end")
        time.sleep(POLL_S)


def report_json(diag_record):
    """``diag_record``'s committed record as JSON, or None when none was committed."""
    report = diag_record.read()
    return None if report is None else report.to_json()


def dump_rank0_and_exit(path: str, body, device) -> None:
    """Run ``body`` on two virtual ranks of ``device``, write rank 0's result to ``path`` as JSON and exit at once
    (``os._exit``: no interpreter teardown over the dead CUDA context)."""
    from kernels.fabric import VirtualFabric

    results = VirtualFabric.run(VirtualFabric.create(2, device, timeout_s=60), body)
    write_result(path, results[0])
    sys.stdout.flush()
    os._exit(0)
