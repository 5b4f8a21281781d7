"""Rules that live in one module each (issue 42 item 3), checked where they live and checked not to be recomputed.

- the TP-group rule (``harness.wire.tp_groups``): no ``--tp`` means one
  group, the world; a TP size must be at least 1 and divide the world, and
  the error names ``--tp``; the groups, a rank's group and a group's ranks;
- the command line's shared argument types (``harness.wire.command_line``):
  the commands ``harness.cli`` dispatches to import them from there, never
  ``harness.cli`` itself, so no command imports the line that dispatches to
  it;
- every deadline's default (``contracts.deadlines``): the serving deadline
  the kernels and their stand-ins take, the harness's and the bench's kernel
  deadlines, the wall-clock allowances and how the load scales them; the
  modules that held copies import it.

Each "not recomputed" check reads the sources (no module is imported for
it): a pattern that recomputes a rule may appear only in the rule's home.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from harness.wire.tp_groups import check_tp, group_count, group_ids, group_of, group_ranks, in_group, tp_size

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"
# The TP-group rule recomputed: "tp or world", "tp < world" / "tp >= world", "rank // tp" / "world // tp" (with
# the spellings the harness used: ``req.tp``, ``shape["tp"]``, ``self.world``).
_TP = r"(self\.|req\.|shape\[\")?tp\b\"?\]?"
_WORLD = r"(self\.|shape\[\")?world\b\"?\]?"
TP_RULE = rf"\btp\)? or world\b|{_TP} (<|>=) {_WORLD}|\b(rank|world\b\"?\]?) // {_TP}"


def sources(root: Path = HARNESS) -> dict[str, str]:
    """Every Python file under ``root``: path relative to the repository -> text."""
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py"))}


def matching(pattern: str, files: dict[str, str], home: str) -> list[str]:
    """``path:line`` of every line matching ``pattern`` in ``files`` outside ``home``."""
    found = []
    for path, text in files.items():
        if path == home:
            continue
        found += [f"{path}:{n}" for n, line in enumerate(text.splitlines(), 1) if re.search(pattern, line)]
    return found


# ----------------------------------------------------------------------------- the TP-group rule


def test_no_tp_is_one_group_the_whole_world():
    assert tp_size(None, 8) == 8
    assert group_ids(8, 8) == [None]
    assert group_count(8, 8) == 1
    assert group_of(5, 8, 8) is None
    assert group_ranks(8, 8, None) == list(range(8))
    assert in_group(5, 8, None)


def test_a_tp_that_divides_the_world_splits_it_into_groups_of_consecutive_ranks():
    assert tp_size(2, 8) == 2
    assert group_ids(8, 2) == [0, 1, 2, 3]
    assert group_count(8, 2) == 4
    assert [group_of(rank, 8, 2) for rank in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert group_ranks(8, 2, 3) == [6, 7]
    assert in_group(6, 2, 3) and not in_group(5, 2, 3)


@pytest.mark.parametrize("tp, world, label, message", [
    (3, 4, "the world size", "--tp 3 must divide the world size 4"),
    (3, 4, "--world", "--tp 3 must divide --world 4"),
    (0, 4, "--world", "--tp must be >= 1, got 0"),
    (-2, 4, "--world", "--tp must be >= 1, got -2"),
])
def test_a_bad_tp_is_a_value_error_naming_the_option(tp, world, label, message):
    with pytest.raises(ValueError) as caught:
        tp_size(tp, world, label)
    assert str(caught.value) == message


def test_check_tp_accepts_none_and_sizes_from_one():
    check_tp(None)
    check_tp(1)
    with pytest.raises(ValueError, match="^--tp must be >= 1, got 0$"):
        check_tp(0)


def test_the_tp_rule_is_not_recomputed_in_the_harness():
    # "tp or world" (no --tp: the world), "rank // tp" / "world // tp" (a rank's group, the group count) and
    # "tp < world" / "tp >= world" (one group or several) belong to harness.wire.tp_groups only.
    assert matching(TP_RULE, sources(), "harness/wire/tp_groups.py") == []


def test_the_rule_check_can_fail():
    files = {"harness/x.py": ("size = req.tp or world\ngroup = rank // tp if tp < world else None\n"
                              "groups = [None] if shape[\"tp\"] >= shape[\"world\"] else n\nn = self.world // self.tp\n"
                              "tp <= WARP and tp >= 1\n"),
             "harness/wire/tp_groups.py": "size = tp or world\n"}
    assert matching(TP_RULE, files, "harness/wire/tp_groups.py") == [f"harness/x.py:{n}" for n in (1, 2, 3, 4)]


# ----------------------------------------------------------------------------- the commands' shared argument types


def test_no_module_imports_the_command_line_but_its_entry_points():
    # harness.cli hands bench, fuzz, record, compile and scale to their modules by importlib: were they to import
    # harness.cli back (for an argument type), the two would import each other through a loop the import graph of
    # tests/harness/test_structure.py cannot see.
    allowed = {"harness/__main__.py", "harness/cli_docs.py"}
    found = [f"{path}:{n}" for path, text in sources().items() if path not in allowed
             for n, line in enumerate(text.splitlines(), 1)
             if re.search(r"^\s*(from harness\.cli import|import harness\.cli\b|from harness import cli\b)", line)
             or re.search(r"import_module\([\"']harness\.cli[\"']\)", line)]
    assert found == []


def test_the_commands_share_one_argument_type_module():
    from harness.wire import command_line  # noqa: PLC0415 - the module under test

    for module in ("harness/cli.py", "harness/bench/__init__.py", "harness/fuzz/__init__.py"):
        text = (ROOT / module).read_text(encoding="utf-8")
        assert "def number_type" not in text, module
        assert "from harness.wire.command_line import" in text, module
    assert command_line.positive_int("3") == 3
    with pytest.raises(Exception, match=r"^expected a whole number >= 1, got '0'$"):
        command_line.positive_int("0")
    with pytest.raises(Exception, match=r"^expected a number of seconds > 0, got 'nan'$"):
        command_line.positive_seconds("nan")


# ----------------------------------------------------------------------------- deadlines


def test_the_serving_deadline_is_ten_minutes_in_both_units():
    from contracts import deadlines  # noqa: PLC0415 - the module under test

    assert deadlines.SERVING_DEADLINE_NS == 600 * 10**9
    assert deadlines.SERVING_DEADLINE_MS * 10**6 == deadlines.SERVING_DEADLINE_NS
    assert deadlines.BENCH_TIMEOUT_MS * 10**6 == deadlines.BENCH_TIMEOUT_NS == 2 * 10**9


def test_the_harness_kernel_deadlines_are_short_and_the_serving_one_long():
    from contracts import deadlines  # noqa: PLC0415 - the module under test

    harness_ns = [deadlines.ALLREDUCE_MHC_HARNESS_TIMEOUT_MS * 10**6, deadlines.MARKOV_FUSED_HARNESS_TIMEOUT_NS,
                  deadlines.MARKOV_SHARDED_CONFIG_TIMEOUT_NS]
    assert harness_ns == [5 * 10**9, 10 * 10**9, 60 * 10**9]
    assert max(harness_ns) < deadlines.SERVING_DEADLINE_NS


def test_the_deadline_copies_are_the_one_homes():
    from contracts import deadlines  # noqa: PLC0415 - the module under test
    from contracts.markov_sharded import DEFAULT_TIMEOUT_NS  # noqa: PLC0415 - the module under test
    from contracts.allreduce_mhc import constructor  # noqa: PLC0415 - the module under test
    from golden.public.common import SERVING_DEADLINE_NS as GOLDEN_NS  # noqa: PLC0415 - the module under test
    from harness.families.catalog import DEFAULT_PER_LAUNCH_S  # noqa: PLC0415 - the module under test
    from harness.launch import load_scale  # noqa: PLC0415 - the module under test
    from kernels.diag import SERVING_DEADLINE_NS as KERNEL_NS  # noqa: PLC0415 - the module under test

    assert GOLDEN_NS is KERNEL_NS is deadlines.SERVING_DEADLINE_NS
    assert inspect.signature(constructor).parameters["timeout_ms"].default is deadlines.SERVING_DEADLINE_MS
    assert DEFAULT_TIMEOUT_NS is deadlines.MARKOV_SHARDED_CONFIG_TIMEOUT_NS
    assert DEFAULT_PER_LAUNCH_S is deadlines.DEFAULT_PER_LAUNCH_S == 30.0
    assert (load_scale.STARTUP_S, load_scale.CASE_ALLOWANCE_S, load_scale.MAX_FACTOR) == (90.0, 20.0, 10.0)
    assert load_scale.scaled_defaults is deadlines.scaled_defaults


def test_the_load_scales_the_wall_clock_defaults_and_keeps_given_values():
    from contracts.deadlines import scaled_defaults  # noqa: PLC0415 - the module under test

    assert scaled_defaults(2.0, startup_s=None, per_launch_s=None) == {
        "startup_s": 180.0, "case_allowance_s": 40.0, "per_launch_s": 60.0}
    assert scaled_defaults(3.0, startup_s=5.0, per_launch_s=7.0) == {
        "startup_s": 5.0, "case_allowance_s": 60.0, "per_launch_s": 7.0}


# A deadline default written as a number: a name ending in a deadline's unit, or a timeout parameter, set to a literal.
DEADLINE_LITERAL = (r"\b\w*(TIMEOUT_NS|TIMEOUT_MS|DEADLINE_NS|DEADLINE_MS|PER_LAUNCH_S|CASE_ALLOWANCE_S)\s*=\s*[\d(]"
                    r"|\btimeout_(ns|ms)\s*(:\s*[\w.]+\s*)?=\s*[\d(]|\bSTARTUP_S\s*=\s*90")


def test_no_deadline_default_is_written_outside_contracts_deadlines():
    files = {path: text for package in ("contracts", "golden", "kernels", "harness")
             for path, text in sources(ROOT / package).items()}
    assert matching(DEADLINE_LITERAL, files, "contracts/deadlines.py") == []


def test_the_deadline_check_can_fail():
    files = {"kernels/x.py": "SERVING_DEADLINE_NS = 600 * 1_000_000_000\ndef f(timeout_ns: int = 10_000):\n"
                             "HARNESS_TIMEOUT_MS = 5_000.0\nDEFAULT_TIMEOUT_NS = SERVING_DEADLINE_NS\n"}
    assert matching(DEADLINE_LITERAL, files, "contracts/deadlines.py") == [f"kernels/x.py:{n}" for n in (1, 2, 3)]
