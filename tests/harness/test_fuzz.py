"""``harness fuzz``: valid deterministic draws, shrinking, the planted-fault find-and-shrink, the CLI's exit codes.

The planted fault (``planted_fault.ShardEdgeFault``: a wrong draft token
when a call has >= 5 rows and a NaN sits on an inner shard edge) runs through
the real machinery: ``harness fuzz`` on the virtual launcher (worker
processes), the substitute selected by ``$RANKCHECK_TEST_PLANTED_SYSTEM``.
Seed 160 draws such a case second (at world 4, vocabulary 256, two calls,
two steps); the shrinker must reach the minimal case for that fault: one
call of exactly 5 rows, world 2, one NaN at an inner shard edge. Of seeds 0
to 2999 whose first batch holds a world-4 failure that shrinks to that
minimum, it needs the fewest harness runs (the first batch, four shrink
batches, then the replay: about 45 s on 2 shared cores; seed 3's case took
nine). The same search runs in milliseconds over a model of the fault
(``fault_shows``, ``ModelRunner``), from seed 3's larger case, for the
shrinker and the fuzz loop alone.
"""

import os
import random
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from planted_fault import FAULT_ROWS, PLANTED, internal_edge_columns

from golden.families import FAMILIES
from harness.families import PLANTED_SYSTEM_VAR, planted_system
from harness.fuzz import main
from harness.fuzz.draw import DEFAULT_WORLDS, draw_scenario
from harness.fuzz.run import fuzz, replay_command, signature_of, write_scenario
from harness.fuzz.shrink import reductions, shrink
from scenarios.builders import resolve_vocab
from scenarios.loader import load
from scenarios.schema import validate

ROOT = Path(__file__).resolve().parents[2]


def drawn_yaml(family: str, seed: int, n: int = 12) -> list[str]:
    """The YAML texts of the first ``n`` scenarios a seed draws."""
    rng = random.Random(seed)
    return [yaml.safe_dump(draw_scenario(rng, family, DEFAULT_WORLDS, i)) for i in range(n)]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_seed_draws_the_same_scenarios(family):
    assert drawn_yaml(family, 7) == drawn_yaml(family, 7)
    assert drawn_yaml(family, 7) != drawn_yaml(family, 8)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_drawn_scenario_is_valid(family, tmp_path):
    rng = random.Random(123)
    for i in range(50):
        scenario = draw_scenario(rng, family, (1, 2, 4, 8), i)
        validate(scenario, f"draw {i}", family_dir=family)
        assert scenario["size"] == "cpu" and scenario["expect"] == {"outcome": "golden"}
        for t in scenario.get("inputs", {}).get("temperatures", []):
            assert t == 0.0 or t in (0.25, 0.5, 1.0, 2.0, 4.0)
    # the written file is safe YAML the loader reads back unchanged
    assert load(write_scenario(tmp_path, scenario)).name == scenario["name"]


def test_every_reduction_of_a_drawn_scenario_is_smaller_or_refused():
    rng = random.Random(5)
    scenario = draw_scenario(rng, "markov_sharded", (4,), 0)
    assert reductions(scenario), "a random scenario has something to shrink"


def fault_shows(d: dict) -> bool:
    """The planted fault's condition evaluated on a scenario dict (what ShardEdgeFault sees at the run)."""
    world, vocab = d["worlds"][0], d["config"]["vocab"]
    edges = set(internal_edge_columns(vocab, world))
    steps = d["config"]["steps"]
    for inj in d.get("inject", []):
        if inj["kind"] != "nan_logits":
            continue
        for p in inj["positions"]:
            on_edge = edges & set(resolve_vocab(p["vocab"], vocab, world))
            if on_edge and p["step"] < steps and any(c["rows"] >= FAULT_ROWS and p["row"] < c["rows"]
                                                     for c in d["calls"]):
                return True
    return False


def test_shrink_reaches_the_minimal_case_with_a_model_of_the_fault():
    """The shrinker alone, over a predicate instead of harness runs: it reaches the fault's minimum."""
    rng = random.Random(3)
    drawn = [draw_scenario(rng, "markov_sharded", DEFAULT_WORLDS, i) for i in range(4)]
    failing = next(d for d in drawn if fault_shows(d))
    minimal = shrink(failing, ("fail",), lambda cands: [("fail",) if fault_shows(c) else None for c in cands])
    assert_minimal_for_the_fault(minimal)


def assert_minimal_for_the_fault(minimal: dict) -> None:
    """One call of exactly 5 rows at world 2, one NaN at an inner shard edge, nothing else left."""
    assert minimal["worlds"] == [2]
    assert [c["rows"] for c in minimal["calls"]] == [FAULT_ROWS]
    assert minimal["calls"][0].get("repeat", 1) == 1
    (inj,) = minimal["inject"]
    assert inj["kind"] == "nan_logits"
    (position,) = inj["positions"]
    vocab = minimal["config"]["vocab"]
    assert set(resolve_vocab(position["vocab"], vocab, 2)) <= set(internal_edge_columns(vocab, 2))
    assert position["row"] == 0 and position["step"] == 0
    assert vocab == 32 and minimal["config"]["steps"] == 1  # 16 * world: the smallest vocabulary at world 2
    assert minimal["config"]["max_rows"] == minimal["config"]["max_reqs"] == FAULT_ROWS
    assert minimal["inputs"]["temperatures"] == [0.0]
    assert not minimal["graph"]["capture"]


def test_the_planted_system_is_only_a_tests_class(monkeypatch):
    monkeypatch.delenv(PLANTED_SYSTEM_VAR, raising=False)
    assert planted_system("markov_sharded") is None
    monkeypatch.setenv(PLANTED_SYSTEM_VAR, "markov_sharded=golden.markov_sharded:GoldenMarkovSharded")
    with pytest.raises(ValueError, match="tests"):
        planted_system("markov_sharded")
    monkeypatch.setenv(PLANTED_SYSTEM_VAR, PLANTED)
    assert planted_system("markov_fused") is None
    assert planted_system("markov_sharded").__name__ == "ShardEdgeFault"


def test_signatures_and_the_replay_command(tmp_path):
    assert signature_of({"status": "pass"}) is None and signature_of({"status": "not-available"}) is None
    assert signature_of({"status": "fail", "detail": "3 mismatching"}) == ("fail",)
    assert signature_of({"status": "error", "detail": "ValueError: rows"}) == ("error", "ValueError")
    scenario = {"family": "markov_sharded", "name": "fuzz_0001_min", "worlds": [2]}
    path = tmp_path / "shrunk" / "markov_sharded" / "fuzz_0001_min.yaml"
    assert replay_command(path, scenario, "cpu", None) == (
        f"python -m harness replay markov_sharded/fuzz_0001_min --world 2 --launcher cpu "
        f"--scenario-root {tmp_path / 'shrunk'}")


@pytest.mark.parametrize("argv", [["--family", "nope", "--budget-s", "1"], ["--family", "markov_sharded"],
                                  ["--family", "markov_sharded", "--budget-s", "0"],
                                  ["--family", "markov_sharded", "--budget-s", "1", "--world", "3"]])
def test_bad_arguments_exit_2(argv, tmp_path, capsys):
    assert main(argv + ["--run-dir", str(tmp_path)]) == 2


def run_fuzz(args: list, tmp_path: Path, env_extra: dict | None = None, timeout: int = 1200):
    """``python -m harness fuzz ARGS`` in a subprocess; the completed process."""
    env = dict(os.environ)
    env.pop(PLANTED_SYSTEM_VAR, None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "harness", "fuzz", *args, "--run-dir", str(tmp_path / "run")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_a_clean_fuzz_run_exits_0_and_counts_its_cases(tmp_path):
    done = run_fuzz(["--family", "markov_sharded", "--launcher", "cpu", "--budget-s", "1", "--seed", "7",
                     "--world", "1", "2"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    # the first batch (4 cases) always runs whole; how many more fit in the budget is the machine's speed
    counted = re.search(r"(\d+) cases tried \(seed 7\), none failed", done.stdout)
    assert counted and int(counted.group(1)) >= 4, done.stdout


@pytest.mark.slow
def test_the_fuzzer_finds_and_shrinks_the_planted_fault(tmp_path):
    # the virtual launcher (one worker process a job, no torchrun agent): each of the shrink's many batches costs
    # less than half of the cpu launcher's; fuzzing on the cpu launcher is test_a_clean_fuzz_run_exits_0_...'s
    done = run_fuzz(["--family", "markov_sharded", "--launcher", "virtual", "--budget-s", "30", "--seed", "160"],
                    tmp_path, {PLANTED_SYSTEM_VAR: PLANTED})
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "4 cases tried (seed 160); fuzz_0001 failed" in out
    shrunk = tmp_path / "run" / "fuzz" / "shrunk" / "markov_sharded" / "fuzz_0001_min.yaml"
    assert "shrunk in" in out and str(shrunk) in out
    assert_minimal_for_the_fault(yaml.safe_load(shrunk.read_text()))
    assert load(shrunk).worlds == (2,)
    assert (f"replay: python -m harness replay markov_sharded/fuzz_0001_min --world 2 --launcher virtual "
            f"--scenario-root {shrunk.parent.parent}") in out
    # the printed command reproduces the fault from the shrunk file alone
    replay = shlex.split(out.split("replay: ", 1)[1].splitlines()[0])
    again = subprocess.run([sys.executable, *replay[1:], "--run-dir", str(tmp_path / "replay")], cwd=ROOT,
                           env=dict(os.environ, **{PLANTED_SYSTEM_VAR: PLANTED}), capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 1, again.stdout + again.stderr
    assert "draft_tokens {'row': 0, 'step': 0}" in again.stdout


class ModelRunner:
    """A stand-in for BatchRunner: the planted fault's condition instead of harness runs (no processes)."""

    def __init__(self, run_dir: Path, fault: bool = True, delay: float = 0.0, clock=None) -> None:
        self.run_dir, self.launcher, self.impl, self.fault, self.delay = run_dir, "cpu", None, fault, delay
        self.clock = clock  # a batch takes ``delay`` seconds of this fake clock
        self.details, self.unavailable, self.seen = {}, set(), []

    def run(self, scenarios, tag=None):
        """Each scenario's signature under the model of the fault."""
        self.seen.extend(yaml.safe_dump(s) for s in scenarios if tag is None)
        if self.clock is not None:
            self.clock.advance(self.delay)
        return [("fail",) if self.fault and fault_shows(s) else None for s in scenarios]


def test_the_fuzz_loop_shrinks_and_writes_the_minimal_file(tmp_path):
    result = fuzz("markov_sharded", DEFAULT_WORLDS, 3, 60.0, ModelRunner(tmp_path), log=lambda line: None)
    assert result.tried == 4 and result.failing["name"] == "fuzz_0001" and result.signature == ("fail",)
    assert result.shrunk_path == tmp_path / "fuzz" / "shrunk" / "markov_sharded" / "fuzz_0001_min.yaml"
    assert_minimal_for_the_fault(yaml.safe_load(result.shrunk_path.read_text()))
    assert load(result.shrunk_path).name == "fuzz_0001_min"
    assert (tmp_path / "fuzz" / "failing" / "markov_sharded" / "fuzz_0001.yaml").is_file()
    assert result.replay.endswith(f"--world 2 --launcher cpu --scenario-root {tmp_path / 'fuzz' / 'shrunk'}")


class FakeClock:
    """The fuzz loop's ``time``: monotonic time moves only when a batch runs."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        """The fake monotonic time."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass."""
        self.now += seconds


def test_the_cases_a_seed_draws_do_not_depend_on_the_batch_size(tmp_path, monkeypatch):
    import harness.fuzz.run

    clock = FakeClock()
    monkeypatch.setattr(harness.fuzz.run, "time", clock)
    runs = []
    for batch in (4, 3):
        runner = ModelRunner(tmp_path, fault=False, delay=0.3, clock=clock)  # one batch: it outlasts the budget
        fuzz("markov_fused", DEFAULT_WORLDS, 9, 0.2, runner, batch=batch, log=lambda line: None)
        runs.append(runner.seen)
    assert len(runs[0]) == 4 and runs[1] == runs[0][:3]
