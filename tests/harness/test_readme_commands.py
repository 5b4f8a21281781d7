"""Every command README.md and the pages of docs/ show in a ```bash block is run by a test, here or where a table says.

The commands are read from the pages themselves (continuation lines joined,
comments split off), so no page can show a command nobody runs: each one
is either

- executed here and must end with the exit code its page documents for it in
  its comment (``# exit 2: ...``; one documented "without a GPU" is checked
  only on such a machine), or, for the commands of a GPU node, with
  a non-zero exit and a message that a GPU is needed (on a machine without
  one; with a GPU they are not run here, where they would take minutes);
- or named in ``RUN_ELSEWHERE`` with the place that runs it (every command
  that is not a ``python``/``python3``/``.venv/bin/python``/``rankcheck``/``make``
  command must be: this test never starts anything else, e.g. a ``git`` command
  or README's ``. .venv/bin/activate``, checked by ``test_the_venv_has_the_rankcheck_command``).

A command in neither fails ``test_every_readme_command_is_run_somewhere``.
A shell script block (one starting with ``#!``) is one entry, named by its
first line after the shebang; what it runs is its own test's business.
Executed commands run as the pages write them except that ``python``,
``python3`` and ``.venv/bin/python`` are this interpreter, ``rankcheck`` (the
venv's, on the PATH once README's activation ran) is this interpreter's
``-m harness`` (the same parser), ``make`` runs with
``NO_VENV=1 PYTHON=`` this interpreter (the venv ``make test`` or ``make venv``
creates is the one running the tests), and ``validate``/``replay``/``fuzz``
get a ``--run-dir`` under the test's temporary directory, so nothing is
written into the working tree.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_cpu_launcher import processes_of

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# README and the topic pages it links (docs/cli.md, generated from the parsers, shows no bash block).
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_DEADLINE_S = 600  # a deadline against a hung command, not a speed bound: minutes on a busy 2-core machine
SCRIPT = "<script>"

RUN_ELSEWHERE = {
    "make validate": ".ci/run, after make test (the full CPU validation, minutes)",
    "make test": ".ci/run: the CI job itself",
    "make validate NO_VENV=1 PYTHON=python3": "the GPU machine (the same target as make validate, run by .ci/run, "
                                              "with the venv bypassed)",
    ". .venv/bin/activate": "the user's shell: puts the venv's rankcheck on the PATH "
                            "(test_the_venv_has_the_rankcheck_command)",
    "rankcheck compile --arch sm_90a": "make compile; tests/kernels/test_compile_gate.py runs the same main "
                                                "over a subset of the variants",
    "python -m torch.distributed.run --standalone --nproc-per-node 2 examples/decode_loop.py --impl golden "
    "--desync-rank 1 --record /tmp/rankcheck-recording":
        "tests/examples/test_decode_loop.py runs it as written (the recording under its temporary directory), "
        "then the replay below",
    "rankcheck replay --bundle /tmp/rankcheck-recording --impl golden":
        "tests/examples/test_decode_loop.py, on the recording the command above made",
    "rankcheck flight /tmp/rankcheck-flight":
        "tests/examples/test_graph_desync.py runs it on the rings of the graph_desync command above (GPU); "
        "tests/harness/test_flight_cli.py runs `flight` on rings written on the CPU",
    f"{SCRIPT} #SBATCH --nodes=18 --ntasks-per-node=1 --gpus-per-node=4 --time=01:00:00":
        "tests/harness/test_nightly.py runs the script's commands as 2 agents of 2 processes on one host",
}
# Commands of a GPU node: without a GPU they must refuse, in words, instead of passing having tested nothing.
NEEDS_GPU = {
    "make gpu-test NO_VENV=1 PYTHON=python3",
    "rankcheck golden --measure-rcp",
    "make bench NO_VENV=1 PYTHON=python3",
    "rankcheck golden --probe",
    "python3 -m torch.distributed.run --standalone --nproc-per-node 2 examples/decode_step.py",
    "python3 -m torch.distributed.run --standalone --nproc-per-node 2 examples/graph_desync.py --desync-rank 1 "
    "--flight-dir /tmp/rankcheck-flight",
}
# Only these programs are started from the pages; anything else must have a row in RUN_ELSEWHERE.
RUNNABLE = ("python", "python3", ".venv/bin/python", "rankcheck", "make")
INTERPRETERS = ("python", "python3", ".venv/bin/python")
GPU_MESSAGE = re.compile(r"needs a (CUDA )?GPU")


def bash_blocks(text: str) -> list[list[str]]:
    """The lines of every ```bash block of a Markdown text."""
    return [block.splitlines() for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)]


def block_commands(lines: list[str]) -> list[tuple[str, str]]:
    """(command, comment) of each command of a block: continuations joined, whitespace normalised."""
    if lines and lines[0].startswith("#!"):
        return [(f"{SCRIPT} {lines[1].strip()}", "")]
    commands, pending = [], ""
    for line in lines:
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        parts = re.split(r"(?:^|\s)#\s", pending, maxsplit=1)
        command, comment = parts[0], parts[1] if len(parts) > 1 else ""
        if command.strip():
            commands.append((" ".join(command.split()), comment.strip()))
        pending = ""
    return commands


def readme_commands() -> list[tuple[str, str]]:
    """Every (command, comment) of the bash blocks of README and docs/*.md, in order."""
    return [c for page in PAGES for block in bash_blocks(page.read_text(encoding="utf-8"))
            for c in block_commands(block)]


def documented_exit(comment: str) -> int | None:
    """The exit code a command's comment documents (``exit N``), or None."""
    found = re.search(r"\bexit (\d+)\b", comment)
    return int(found.group(1)) if found else None


def executed() -> list[tuple[str, str]]:
    """The commands of the pages this module runs itself."""
    return [(c, note) for c, note in readme_commands() if c not in RUN_ELSEWHERE]


def as_argv(command: str, run_dir: Path) -> list[str]:
    """A page's command with this interpreter for python, the venv's programs and make, and a run directory for
    validate/replay/fuzz."""
    argv = []
    for word in shlex.split(command):
        if word in INTERPRETERS:
            argv.append(sys.executable)
        elif word == "rankcheck":
            argv += [sys.executable, "-m", "harness"]
        elif word in ("PYTHON=python", "PYTHON=python3"):
            argv.append(f"PYTHON={sys.executable}")
        else:
            argv.append(word)
    if argv[0] == "make" and not any(w.startswith("PYTHON=") for w in argv):
        argv += ["NO_VENV=1", f"PYTHON={sys.executable}"]
    if argv[1:4] in (["-m", "harness", "validate"], ["-m", "harness", "replay"], ["-m", "harness", "fuzz"]):
        argv += ["--run-dir", str(run_dir)]
    return argv


def user_environment() -> dict[str, str]:
    """This process's environment without what an enclosing ``make`` passes down (``make test ARGS=...`` would
    otherwise reach the page's own ``make`` command, which a user typing it never has): its flags, and the variables
    given on its command line, which make also exports as plain environment variables."""
    overrides = re.split(r"(?<!\\)\s+", os.environ.get("MAKEFLAGS", "").partition(" -- ")[2].strip())
    dropped = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"}
    dropped |= {word.split("=", 1)[0] for word in overrides if re.match(r"[A-Za-z_][A-Za-z0-9_]*=", word)}
    return {k: v for k, v in os.environ.items() if k not in dropped}


def test_user_environment_drops_an_enclosing_makes_variables(monkeypatch):
    monkeypatch.setenv("MAKEFLAGS", " -- ARGS=--durations=30 XDIST=-n\\ 2")
    monkeypatch.setenv("MAKELEVEL", "1")
    monkeypatch.setenv("ARGS", "--durations=30")
    monkeypatch.setenv("XDIST", "-n 2")
    env = user_environment()
    assert not {"MAKEFLAGS", "MAKELEVEL", "ARGS", "XDIST"} & set(env) and env["PATH"] == os.environ["PATH"]


def test_commands_are_read_from_every_block():
    commands = [c for c, _ in readme_commands()]
    # one entry from each kind of block: the two commands, the GPU node's page, the nightly script, a replay
    assert "make test" in commands and "make gpu-test NO_VENV=1 PYTHON=python3" in commands
    assert any(c.startswith(SCRIPT) for c in commands)
    assert any(c.startswith("rankcheck replay") for c in commands)


def test_block_parsing_joins_continuations_and_splits_comments():
    lines = ["python -m harness validate \\", "    --world 3   # exit 2: why", "", "# a comment line", "make test"]
    assert block_commands(lines) == [("python -m harness validate --world 3", "exit 2: why"), ("make test", "")]
    assert documented_exit("exit 130 when interrupted") == 130 and documented_exit("runs the tests") is None


def test_every_readme_command_is_run_somewhere():
    unplaced = [c for c, note in executed() if c not in NEEDS_GPU and documented_exit(note) is None
                or c.split()[0] not in RUNNABLE]
    assert not unplaced, ("Commands of the pages that no test runs: give each a documented `# exit N` (run here), "
                          f"or a row in RUN_ELSEWHERE / NEEDS_GPU: {unplaced}")
    stale = set(RUN_ELSEWHERE) - {c for c, _ in readme_commands()}
    assert not stale, f"RUN_ELSEWHERE names commands no page shows any longer: {sorted(stale)}"


def test_the_venv_has_the_rankcheck_command():
    """README's ``. .venv/bin/activate`` puts the venv's ``rankcheck`` on the PATH: the tests' venv has it."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("not run from a venv (NO_VENV=1): no .venv/bin/rankcheck to check")
    script = Path(sys.executable).parent / "rankcheck"
    assert script.is_file(), f"{script} is missing: make venv installs the project (pip install -e) with its script"
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=COMMAND_DEADLINE_S)
    assert done.returncode == 0 and "rankcheck" in done.stdout + done.stderr, done.stdout + done.stderr


def _has_gpu() -> bool:
    """Whether this machine has a CUDA GPU for torch."""
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize("command, comment", executed(), ids=[c for c, _ in executed()])
def test_readme_command_ends_as_documented(command, comment, tmp_path):
    needs_gpu = command in NEEDS_GPU
    if needs_gpu and _has_gpu():
        pytest.skip("a GPU node's command: run on the GPU machine (make gpu-test), minutes long")
    if "without a GPU" in comment and _has_gpu():
        pytest.skip("its page documents this exit code for a machine without a GPU")
    want = documented_exit(comment)
    if (want is None and not needs_gpu) or command.split()[0] not in RUNNABLE:
        pytest.fail(f"its page documents no exit code for {command!r}, or it is no python, rankcheck or make command")
    done = subprocess.run(as_argv(command, tmp_path / "run"), cwd=ROOT, capture_output=True, text=True,
                          timeout=COMMAND_DEADLINE_S, env=user_environment())
    output = done.stdout + done.stderr
    if needs_gpu:
        assert done.returncode != 0, output
        assert GPU_MESSAGE.search(output), output
    else:
        assert done.returncode == want, output
    assert processes_of(tmp_path) == []
