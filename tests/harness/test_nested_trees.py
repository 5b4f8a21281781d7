"""A harness started by a harness: ending the outer tree ends the inner tree too, even when the inner harness died.

The inner harness (a child Python process) starts a supervised tree of its
own (a sleeper in a session of its own, as torchrun's workers are) and is
then killed outright, leaving the sleeper orphaned; the outer tree still
finds it by the tokens its environment carries and ends it.
"""

import os
import signal
import sys
import textwrap
import time

from harness.launch.supervision import Supervised, processes_with_token
from harness.wire.processes import process_alive
from hang_guard import HANG_GUARD_S

INNER = textwrap.dedent('''
    import os, signal, sys
    from harness.launch.supervision import Supervised
    inner = Supervised([sys.executable, "-c", "import time; time.sleep(600)"])
    open(sys.argv[1], "w").write(str(inner.proc.pid))
    os.kill(os.getpid(), signal.SIGKILL)  # the inner harness dies without ending its tree
''')


def test_the_outer_tree_ends_an_orphaned_inner_tree(tmp_path):
    script, pid_file = tmp_path / "inner.py", tmp_path / "sleeper.pid"
    script.write_text(INNER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(os.getcwd())] + sys.path))
    outer = Supervised([sys.executable, str(script), str(pid_file)], env=env, grace_s=0.5)
    try:
        outcome = outer.wait(HANG_GUARD_S)  # a hang guard, not a speed bound
        assert outcome.returncode == -9  # the inner harness was killed
        # the wait ended the whole tree: the orphaned sleeper, a process of the inner tree, is gone
        sleeper = int(pid_file.read_text())
        deadline = time.monotonic() + HANG_GUARD_S
        while process_alive(sleeper) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not process_alive(sleeper)
        assert processes_with_token(outer.token) == {}
    finally:
        outer.end_all()
        if pid_file.exists() and process_alive(int(pid_file.read_text())):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)  # only if the outer tree failed to end it
