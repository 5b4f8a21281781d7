"""examples/decode_loop.py on the CPU: the public objects' golden stand-ins recorded under torchrun (2 processes, gloo)
with a planted skipped step on rank 1, then replayed offline: the replay exits 1 and names rank 1 and the flight
recorder's launch of the all-reduce call where rank 1's calls left its peer's.

These are docs/hangs.md's "Recording your own job" commands, run as the page writes them (the recording
directory moved under the test's temporary directory, ``rankcheck`` as this interpreter's ``-m harness``); the GPU
run is the same with ``--impl kernel``.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "decode_loop.py"
sys.path.insert(0, str(EXAMPLE.parent))

import decode_loop  # noqa: E402
from bounded_run import run_bounded  # noqa: E402

PAGE = ROOT / "docs" / "hangs.md"
PAGE_DIR = "/tmp/rankcheck-recording"
RECORD = ("python -m torch.distributed.run --standalone --nproc-per-node 2 examples/decode_loop.py --impl golden "
          f"--desync-rank 1 --record {PAGE_DIR}")
REPLAY = f"rankcheck replay --bundle {PAGE_DIR} --impl golden"
# An LL all-reduce call is two launches of its instance (publish, consumer): the call of step s begins launch 2 s.
LL_LAUNCHES_PER_CALL = 2
# The replay's verdict line: "first divergence: rank 1 deviates at call 34 (ar.__call__, flight launch 4): ...".
NAMED = re.compile(r"^\s*first divergence: rank (\d+)\b.*?\((\w+)\.[\w_]+, flight launch(?:es)? (\d+)\b", re.M)


def _run(command: str, directory: Path) -> subprocess.CompletedProcess:
    """The page's command with this interpreter (``rankcheck``: its ``-m harness``) and ``directory`` for the
    recording (``bounded_run``)."""
    program = {"python": [sys.executable], "rankcheck": [sys.executable, "-m", "harness"]}
    argv = [a for w in command.split() for a in program.get(w, [w.replace(PAGE_DIR, str(directory))])]
    return run_bounded(argv, 300)


def test_the_page_shows_these_commands():
    text = " ".join(PAGE.read_text(encoding="utf-8").split())
    assert RECORD in text and REPLAY in text


def test_the_example_imports_nothing_private_of_the_harness():
    source = EXAMPLE.read_text(encoding="utf-8")
    assert not re.search(r"^\s*(from|import) harness\b", source, flags=re.M)
    assert "_distributed_handle" not in source and ".launch(" not in source


def test_options_and_their_bounds():
    args = decode_loop.parse_args([])
    assert (args.impl, args.steps, args.desync_rank, args.desync_step) == ("kernel", 6, None, 2)
    assert args.objects == ["ar", "sampler", "draft"]
    for bad in (["--steps", "0"], ["--desync-step", "5"], ["--objects", "nope"], ["--timeout-s", "0"]):
        with pytest.raises(SystemExit) as exc:
            decode_loop.parse_args(bad)
        assert exc.value.code == 2, bad


def test_a_planted_skip_is_recorded_and_replayed_naming_the_rank_and_the_launch(tmp_path):
    recorded = _run(RECORD, tmp_path)
    assert recorded.returncode == 1, recorded.stdout + recorded.stderr  # the ranks met in a mismatched exchange
    assert (tmp_path / "world.yaml").is_file()
    replayed = _run(REPLAY, tmp_path)
    out = replayed.stdout + replayed.stderr
    assert replayed.returncode == 1, out
    named = NAMED.search(replayed.stdout)
    assert named, out
    step = decode_loop.parse_args([]).desync_step
    assert (int(named.group(1)), named.group(2), int(named.group(3))) == (1, "ar", LL_LAUNCHES_PER_CALL * step), out


def test_without_a_desync_the_replay_agrees(tmp_path):
    recorded = _run(RECORD.replace(" --desync-rank 1", " --objects sampler"), tmp_path)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    replayed = _run(REPLAY, tmp_path)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "verdict: ok" in replayed.stdout
