"""The family kit: a fourth family, built in a temporary folder, runs through the harness without a shared module touched.

A kernel family is one folder per layer (docs/adding-a-family.md). This
test writes a tiny one, ``echo``, under ``tmp_path`` and shaped like the
repository: ``golden/echo/`` (its facts, a golden system whose output is its
input, and the reference), ``scenarios/echo/`` (its scenario hooks and two
scenario files), ``harness/families/echo/`` (its adapter and fuzz draw). The
family becomes visible only through ``RANKCHECK_FAMILY_PATH`` (an extra
family root, ``golden.families.FAMILY_PATH_VAR``), which every command here
runs under; nothing in the repository changes. Then ``list``, ``validate
--launcher cpu``, ``fuzz`` and ``pytest``'s scenario collection run it as they
run the three real families.

The kit can fail: its ``broken`` scenario sets ``offset: 1``, which the
golden system adds to its output while the reference does not, so that
case must fail (and with it ``validate``'s exit code) while ``basic``
passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from golden.families import FAMILIES, FAMILY_PATH_VAR

ROOT = Path(__file__).resolve().parents[2]

KIT = {
    "golden/echo/__init__.py": '''
        """The echo family's golden: a rank's output ``y`` is its call input ``x`` (plus ``offset``, a planted bug)."""

        from golden.family_facts import FamilyFacts

        FACTS = FamilyFacts("echo", order=100, tp_key="tp", stepped=False, default_steps=None, shape_input="x",
                            base_logits_input=None, request_map_input=None, request_map_flat=False,
                            anchor_input=None, tolerance_flag=None, routes_experts=False, call_inputs=("x",))


        def reference(static, config, call_inputs, call_params):
            """The unsharded outputs of one call: ``y`` is ``x``."""
            return {"y": call_inputs["x"].clone()}


        class GoldenEcho:
            """The per-rank golden system: ``y`` is ``x`` plus the config's ``offset``; it counts its launches."""

            def __init__(self, comm, static, config):
                self.offset, self.launches = config["offset"], 0

            def launch(self, call_inputs, call_params=None):
                """One call."""
                self.launches += 1
                return {"y": call_inputs["x"] + self.offset}

            def state(self):
                """The system's counters."""
                return {"launches": self.launches}
        ''',
    "scenarios/echo/__init__.py": '''
        """The echo family's scenario layer: config ``width`` (and ``offset``); a call's input ``x`` is [rows, width]."""

        import torch

        from scenarios.draws import normal
        from scenarios.family_hooks import ScenarioHooks


        def config(c, raw, worlds):
            """``width`` (required) and ``offset`` (default 0)."""
            m = c.mapping(raw, "config", ("width", "offset"), required=("width",))
            return {"width": c.extent(m["width"], "config.width", 1),
                    "offset": c.integer(m.get("offset", 0), "config.offset", 0, 1)}


        def inputs(c, raw, size, cfg, worlds):
            """No builder options."""
            c.mapping(raw, "inputs", ())
            return {}


        def params(c, raw, path):
            """No call params."""
            c.mapping(raw, path, ())
            return {}


        def steps(c, m, rows, path, cfg):
            """Echo calls have no steps."""
            if "steps" in m:
                c.fail(f"{path}.steps", "echo calls have no steps")
            return None


        def largest(cfg, calls):
            """The largest input: rows x width."""
            rows = max(call.rows for call in calls)
            return f"rows x width = {rows} x {cfg['width']}", rows * cfg["width"]


        def call(s, i, rows, steps, params, world):
            """``x``: N(0, 1) fp32 [rows, width]."""
            return {"x": normal(s.seed, (rows, s.config["width"]), 1.0, torch.float32, "call", i, "x")}


        HOOKS = ScenarioHooks(config=config, inputs=inputs, params=params, steps=steps, largest=largest,
                              static=lambda s: {}, call=call)
        ''',
    "scenarios/echo/basic.yaml": '''
        name: basic
        family: echo
        description: two calls echoed on every rank
        seed: 7
        worlds: [1, 2]
        size: cpu
        config: {width: 8}
        calls: [{rows: 2}, {rows: 3}]
        expect: {outcome: golden}
        ''',
    "scenarios/echo/broken.yaml": '''
        name: broken
        family: echo
        description: the golden system adds 1, the reference does not (the kit's planted failure)
        seed: 7
        worlds: [1]
        size: cpu
        config: {width: 8, offset: 1}
        calls: [{rows: 2}]
        expect: {outcome: golden}
        ''',
    "harness/families/echo/__init__.py": '''
        """The echo family's adapter: kernel-free (its kernel module does not exist, so ``kernel`` is not available)."""

        from harness.families.family_adapter import FamilyAdapter

        ADAPTER = FamilyAdapter(family="echo", golden_module="golden.echo", kernel_module="harness.families.echo.kernel",
                                tp_key="tp", output_axes={"y": ("row", "col")},
                                fuzz_draw="harness.families.echo.fuzz:draw")
        ''',
    "harness/families/echo/fuzz.py": '''
        """The echo family's fuzz draw: a width and one to three calls."""


        def draw(rng, world):
            """A scenario body at ``world``."""
            return {"config": {"width": rng.randint(1, 16)},
                    "calls": [{"rows": rng.randint(1, 4)} for _ in range(rng.randint(1, 3))], "inject": []}
        ''',
}


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> Path:
    """The echo family's extra family root, written under a temporary folder."""
    root = tmp_path_factory.mktemp("kit")
    for rel, text in KIT.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def run(kit: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """``args`` run from the repository root with ``kit`` as the one extra family root."""
    env = {**os.environ, FAMILY_PATH_VAR: str(kit)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_kit_lives_outside_the_repository_and_only_the_variable_shows_it(kit):
    assert not kit.resolve().is_relative_to(ROOT) and "echo" not in FAMILIES
    shown = run(kit, "-c", "from golden.families import FAMILIES; from harness.families import adapter; "
                           "print(FAMILIES[-1], adapter('echo').golden_module)")
    assert shown.returncode == 0 and shown.stdout.split() == ["echo", "golden.echo"], shown.stderr


def test_list_shows_the_kit_family(kit):
    listed = run(kit, "-m", "harness", "list", "--family", "echo")
    assert listed.returncode == 0, listed.stderr
    assert "2 scenarios" in listed.stdout and "basic" in listed.stdout and "broken" in listed.stdout


def test_validate_passes_the_kit_and_fails_its_planted_bug(kit, tmp_path):
    result = run(kit, "-m", "harness", "validate", "--launcher", "cpu", "--family", "echo", "--no-store",
                 "--run-dir", str(tmp_path / "run"))
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert "PASS          echo/basic[world=1,launcher=cpu]" in out and "echo/basic[world=2,launcher=cpu]" in out
    assert "FAIL          echo/broken[world=1,launcher=cpu]" in out
    assert "Cases : 3 of 3  pass 2  fail 1" in out


def test_fuzz_draws_and_runs_the_kit(kit, tmp_path):
    result = run(kit, "-m", "harness", "fuzz", "--family", "echo", "--launcher", "cpu", "--world", "1",
                 "--budget-s", "1", "--batch", "2", "--run-dir", str(tmp_path / "fuzz"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 cases tried (seed 0), none failed" in result.stdout, result.stdout


def test_pytest_collects_and_runs_the_kit_scenarios(kit, tmp_path):
    result = run(kit, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                 str(kit / "scenarios" / "echo"), "--rankcheck-scenario-root", str(kit / "scenarios"),
                 "--rankcheck-launcher", "cpu", "--rankcheck-run-dir", str(tmp_path / "pytest"),
                 "--rootdir", str(ROOT), "-k", "basic")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
