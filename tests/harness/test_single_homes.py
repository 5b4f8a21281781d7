"""Rules that live in one module each (issue 42 item 3), checked where they live and checked not to be recomputed.

- the TP-group rule (``harness.wire.tp_groups``): no ``--tp`` means one
  group, the world; a TP size must be at least 1 and divide the world, and
  the error names ``--tp``; the groups, a rank's group and a group's ranks;
- the command line's shared argument types (``harness.wire.command_line``):
  the commands ``harness.cli`` dispatches to import them from there, never
  ``harness.cli`` itself, so no command imports the line that dispatches to
  it.

Each "not recomputed" check reads the sources (no module is imported for
it): a pattern that recomputes a rule may appear only in the rule's home.
"""

from __future__ import annotations

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
