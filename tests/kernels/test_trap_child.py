"""The trapping children's runner (``trap_child.run_child``) on the CPU: plain scripts stand in for a child that
exits, one that writes its result and is then held (as the driver holds a trapped context's process), one that
dies without a result and one that hangs without one."""

from __future__ import annotations

import os

import pytest

from trap_child import launch_failed, run_child, run_script, write_result

WRITES = "import sys; sys.path.insert(0, {here!r}); from trap_child import write_result; write_result(sys.argv[1], {{'report': 7}})"
HERE = os.path.dirname(os.path.abspath(__file__))


def script(tmp_path, body: str) -> str:
    """A child script of ``body`` in ``tmp_path``; its path."""
    path = tmp_path / "child.py"
    path.write_text(body + "\n")
    return str(path)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live (not reaped, not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_child_that_writes_and_exits_gives_its_result(tmp_path):
    dump = tmp_path / "out.json"
    result = run_child([script(tmp_path, WRITES.format(here=HERE)), str(dump)], dump, deadline_s=60, exit_grace_s=30)
    assert result == {"report": 7}


def test_a_child_held_after_writing_keeps_its_result_and_is_killed_with_the_stall_said(tmp_path):
    dump = tmp_path / "out.json"
    # The pid is written before the result: the runner may end the child as soon as its result exists.
    body = ("import os, sys; open(sys.argv[1] + '.pid', 'w').write(str(os.getpid()))\n" + WRITES.format(here=HERE)
            + "\nimport threading; threading.Event().wait()")
    with pytest.warns(UserWarning, match="did not exit"):
        result = run_child([script(tmp_path, body), str(dump)], dump, deadline_s=60, exit_grace_s=1)
    assert result["report"] == 7
    assert "state" in result["exit_stall"] and "waits in" in result["exit_stall"], result
    assert not alive(int((tmp_path / "out.json.pid").read_text()))


def test_a_child_that_dies_without_a_result_is_missing_with_its_exit_code(tmp_path):
    dump = tmp_path / "out.json"
    result = run_child([script(tmp_path, "import sys; print('no result'); sys.exit(3)"), str(dump)], dump,
                       deadline_s=60, exit_grace_s=1)
    assert "rc=3" in result["missing"] and "no result" in result["missing"], result


def test_a_child_that_hangs_without_a_result_is_missing_and_killed_at_the_deadline(tmp_path):
    dump = tmp_path / "out.json"
    body = "import os, sys, threading; open(sys.argv[1] + '.pid', 'w').write(str(os.getpid())); threading.Event().wait()"
    result = run_child([script(tmp_path, body), str(dump)], dump, deadline_s=2, exit_grace_s=1)
    assert "still running after 2 s" in result["missing"] and "state" in result["missing"], result
    assert not alive(int((tmp_path / "out.json.pid").read_text()))


def test_a_result_is_written_whole_or_not_at_all(tmp_path):
    path = str(tmp_path / "r.json")
    write_result(path, {"a": [1, 2]})
    assert open(path).read() == '{"a": [1, 2]}' and not os.path.exists(path + ".partial")


class _Stream:
    """A stand-in for the current CUDA stream: ``query`` answers from a script of replies (an exception raises)."""

    def __init__(self, replies) -> None:
        self.replies = list(replies)

    def query(self) -> bool:
        reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
        if isinstance(reply, BaseException):
            raise reply
        return reply


@pytest.mark.parametrize("replies, expected", [
    ([False, False, True], False),                               # busy, then finished cleanly
    ([False, RuntimeError("unspecified launch failure")], True),  # the trap surfaces on a query
])
def test_a_childs_wait_for_its_stream_says_finished_or_failed(monkeypatch, replies, expected):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: _Stream(replies))
    assert launch_failed(deadline_s=30) is expected


def test_a_stream_still_busy_past_the_deadline_is_a_failure_said_not_a_hang(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: _Stream([False]))
    said = launch_failed(deadline_s=0.05)
    assert isinstance(said, str) and "still busy" in said


def test_a_script_run_to_its_end_gives_its_exit_and_output(tmp_path):
    done = run_script([script(tmp_path, "import sys; print('out'); print('err', file=sys.stderr); sys.exit(4)")], 60)
    assert (done.returncode, done.stdout, done.stderr) == (4, "out\n", "err\n")


def test_a_script_past_its_deadline_is_killed_and_fails_the_test_saying_where_it_was(tmp_path):
    body = "import os, sys, threading; open(sys.argv[1], 'w').write(str(os.getpid())); threading.Event().wait()"
    pid_file = tmp_path / "pid"
    with pytest.raises(pytest.fail.Exception, match=r"still running after 5 s \(killed\):\nthread \d+: state"):
        run_script([script(tmp_path, body), str(pid_file)], 5)
    assert not alive(int(pid_file.read_text()))
