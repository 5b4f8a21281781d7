"""A fault planted in one TP group: the ``group`` field of rank-addressed harness injections.

Without ``group`` every TP group gets the fault (its rank is a group rank);
with it only that group does (``Scenario.in_group``), and the groups no
fault reaches expect the golden bits (``Case.in_group``). A file checks
``group >= 0``; a run checks it against its groups (``InjectionContext``
with ``groups``, ``harness.validate.check_fault_groups``).
"""

import pytest

from harness.families.catalog import case_of
from harness.validate import check_fault_groups
from scenarios.fields import Checker
from scenarios.injections import InjectionContext, check_injection
from scenarios.schema import ScenarioError, validate

HANG = {
    "name": "hang_one_group", "family": "markov_sharded", "description": "d", "seed": 1, "worlds": [2],
    "size": "cpu", "config": {"vocab": 2048, "steps": 2, "max_reqs": 8},
    "calls": [{"rows": 2, "repeat": 2}], "deadline_s": 5,
    "inject": [{"kind": "hang", "rank": 1, "launch": 1, "group": 3},
               {"kind": "rank_disagree", "rank": 0, "call": 0, "field": "rows", "value": 1, "group": 2}],
    "expect": {"outcome": "timeout", "timeout": {"rank": 1, "launch": 1}},
}


def test_each_group_gets_only_its_own_faults_and_groups_no_fault_reaches_expect_golden():
    scenario = validate(HANG, "mem.yaml")
    assert scenario.fault_groups() == (2, 3)
    assert [i.kind for i in scenario.in_group(3).injections_for(1, 1)] == ["hang"]
    assert scenario.in_group(3).injections("rank_disagree") == []
    assert [i.kind for i in scenario.in_group(2).injections_for(0, 0)] == ["rank_disagree"]
    assert scenario.in_group(0).inject == () and scenario.in_group(None).inject == ()
    case = case_of(scenario)
    assert case.in_group(3).outcomes == ("timeout",) and case.in_group(3).expect_timeout == {"rank": 1, "launch": 1}
    assert case.in_group(1).outcomes == ("golden",) and case.in_group(1).expect_timeout is None


def test_a_fault_without_a_group_reaches_every_group():
    raw = dict(HANG, inject=[{"kind": "hang", "rank": 1, "launch": 1}, {"kind": "crash", "rank": 0, "launch": 0,
                                                                          "group": 1}])
    scenario = validate(raw, "mem.yaml")
    assert scenario.fault_groups() is None
    assert [i.kind for i in scenario.in_group(5).injections_for(1, 1)] == ["hang"]
    assert case_of(scenario).in_group(5).outcomes == ("timeout",)


@pytest.mark.parametrize("inject, needle", [
    ({"kind": "hang", "rank": 1, "launch": 1, "group": -1}, r"inject\[0\]\.group: expected int >= 0, got -1"),
    ({"kind": "hang", "rank": 1, "launch": 1, "group": "x"}, r"inject\[0\]\.group: expected int >= 0, got 'x'"),
    ({"kind": "padding_rows", "rows": [0], "group": 1}, r"inject\[0\]\.group: unknown key"),
])
def test_a_bad_group_is_named_by_file_and_field(inject, needle):
    with pytest.raises(ScenarioError, match=needle):
        validate(dict(HANG, inject=[inject], expect={"outcome": "golden"}), "mem.yaml")


def test_a_run_checks_the_group_against_the_groups_it_has():
    scenario = validate(dict(HANG, inject=[], expect={"outcome": "golden"}), "mem.yaml")
    context = InjectionContext(Checker("--inject"), scenario.family, scenario.config, scenario.calls, [2], 2,
                               groups=2)
    assert check_injection(context, {"kind": "hang", "rank": 1, "launch": 1, "group": 1}, "").get("group") == 1
    with pytest.raises(ScenarioError, match=r"group: expected int in 0\.\.1, got 2"):
        check_injection(context, {"kind": "hang", "rank": 1, "launch": 1, "group": 2}, "")
    case = case_of(validate(HANG, "mem.yaml"))
    check_fault_groups([(8, [case])], 2)  # 4 groups: 2 and 3 exist
    with pytest.raises(ValueError, match=r"hang_one_group: an injection names TP group 2, but world 4 at tp 2 has "
                                         r"2 group\(s\) \(0\.\.1\)"):
        check_fault_groups([(4, [case])], 2)
