"""``validate``'s pytest-style selection: -k expressions, --scenario globs, --lf, -x and --collect-only.

The expression evaluator is checked against pytest's own
(``_pytest.mark.expression``) on the same words; the runs go through
``cli.main`` with a stand-in ``JobRunner`` that reports chosen statuses
without starting processes (``-x`` stops the units after the first
failure; the real processes and the planted fault are exercised through
the pytest plugin in test_pytest_plugin.py).
"""

import json
import os
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

from harness import cli
from harness.families.catalog import discover
from harness.families.selection import KeywordExpression, case_words, expand_globs
from harness.reports.last_failed import failed_cases, newest_report
from harness.validate import ValidateRequest, WorldPlan, narrow_plan
from harness.wire.case_result import CaseResult
from fake_job_runner import fake_runner

SCENARIOS = str(Path(__file__).resolve().parent / "scenarios")
WORDS = ("markov_sharded", "nan_logits", "nan_logits.yaml", "world=4", "cpu",
         "markov_sharded/nan_logits[world=4,launcher=cpu]")
EXPRESSIONS = ("nan", "NAN", "not nan", "nan and not shard", "(fused or sharded) and world", "cpu or a and b",
               "a and b or cpu", "not (cpu and nan)", "logits[world", "cpu]", "x or y or not z", "not not cpu",
               "markov_sharded/nan_logits")


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_a_keyword_expression_means_what_pytest_means(text):
    def pytest_matcher(name, **kwargs):
        return any(name.lower() in w.lower() for w in WORDS)

    assert KeywordExpression(text).matches(WORDS) == Expression.compile(text).evaluate(pytest_matcher)


@pytest.mark.parametrize("text, words", [("nan and", "got the end"), ("(nan", "expected ')'"),
                                         ("nan)", "')' at column 4"), ("world=4", "'=' at column 6"),
                                         ("and", "'and' at column 1")])
def test_a_bad_expression_names_k_and_where(text, words):
    with pytest.raises(ValueError) as info:
        KeywordExpression(text)
    assert str(info.value).startswith(f"-k {text!r}: ") and words in str(info.value)


def test_globs_expand_to_the_scenarios_they_match_in_catalog_order():
    cases = discover()
    nan_sharded = [c.key for c in cases if c.family == "markov_sharded" and c.name.startswith("nan")]
    assert expand_globs(cases, ["markov_s*/nan*"]) == nan_sharded and len(nan_sharded) == 2
    by_name = expand_globs(cases, ["nan_l*", "basic"])
    assert by_name[:-1] == [c.key for c in cases if c.name.startswith("nan_l")] and by_name[-1] == "basic"
    with pytest.raises(ValueError, match=r"--scenario: the pattern 'zz\*' matches no scenario"):
        expand_globs(cases, ["zz*"])


def plan(cases):
    """Every case at every world it lists, as plan_worlds makes it."""
    worlds = sorted({w for c in cases for w in c.worlds})
    return WorldPlan([(w, [c for c in cases if w in c.worlds]) for w in worlds])


def pairs_of(pairs):
    """The (family/name, world) pairs of a plan."""
    return sorted((c.key, w) for w, cases in pairs for c in cases)


def write_report(path, results):
    """A JSON report holding ``results`` the way Report writes them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": "rankcheck-validate/2",
                                "results": [dict(vars(r), case_id=r.case_id) for r in results]}))
    return path


def test_k_keeps_the_cases_whose_words_match():
    pairs = plan(discover(SCENARIOS))
    line = narrow_plan(pairs, ValidateRequest(keyword="tiny and not (crash or hang) and [world"), "cpu")
    assert pairs_of(pairs) == [("markov_sharded/tiny", w) for w in (1, 2, 4, 8)]
    assert line == "selected 4 of 6 planned (scenario, world) pair(s) by -k 'tiny and not (crash or hang) and [world'"


def test_lf_keeps_the_failed_cases_and_the_cases_of_failed_stored_bits(tmp_path):
    report = write_report(tmp_path / "r" / "report.json", [
        CaseResult("markov_sharded", "tiny", 4, "cpu", "fail"),
        CaseResult("markov_sharded", "tiny", 2, "cpu", "pass"),
        CaseResult("markov_sharded", "tiny_hang", 2, "cpu", "pass"),
        CaseResult("markov_sharded", "tiny_hang:stored-bits", 2, "store", "fail")])
    assert failed_cases(report) == {("markov_sharded/tiny", 4), ("markov_sharded/tiny_hang", 2)}
    pairs = plan(discover(SCENARIOS))
    narrow_plan(pairs, ValidateRequest(last_failed=True, last_report=str(report)), "virtual")
    assert pairs_of(pairs) == [("markov_sharded/tiny", 4), ("markov_sharded/tiny_hang", 2)]


def test_lf_after_a_run_without_failures_keeps_everything_as_pytest_does(tmp_path):
    report = write_report(tmp_path / "report.json", [CaseResult("markov_sharded", "tiny", 4, "cpu", "pass")])
    pairs = plan(discover(SCENARIOS))
    everything = pairs_of(pairs)
    line = narrow_plan(pairs, ValidateRequest(last_failed=True, last_report=str(report)), "cpu")
    assert pairs_of(pairs) == everything and "no failed case" in line


def test_lf_reads_the_newest_report_under_runs(tmp_path):
    old = write_report(tmp_path / "20260101-000000" / "report.json", [])
    new = write_report(tmp_path / "20260101-000001" / "report.json", [])
    os.utime(old, (1, 1))
    os.utime(new, (2, 2))
    assert newest_report(tmp_path) == new
    with pytest.raises(ValueError, match="--lf: no report.*--last-report PATH"):
        newest_report(tmp_path / "none")


@pytest.mark.parametrize("text, words", [("{", "cannot read it as a JSON report"),
                                         ('{"schema": "junit"}', "not a rankcheck validate report"),
                                         ('{"schema": "rankcheck-validate/2", "results": [{"status": "fail"}]}',
                                          "results[0] lacks")])
def test_a_bad_last_report_is_refused_naming_the_option_and_file(tmp_path, text, words):
    path = tmp_path / "report.json"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        failed_cases(path)
    assert str(info.value).startswith(f"--last-report {path}: ") and words in str(info.value)


def test_only_keeps_exactly_the_pairs_asked_for_and_says_why_when_none_runs():
    pairs = plan(discover(SCENARIOS))
    narrow_plan(pairs, ValidateRequest(only=[("markov_sharded/tiny", 8), ("markov_sharded/tiny_crash", 2)]), "cpu")
    assert pairs_of(pairs) == [("markov_sharded/tiny", 8), ("markov_sharded/tiny_crash", 2)]
    assert [w for w, _ in pairs] == [2, 8]  # worlds without a case are dropped
    narrow_plan(pairs, ValidateRequest(keyword="hang"), "cpu")
    assert list(pairs) == [] and pairs.why_empty == "no planned case matches -k 'hang'"


def test_collect_only_lists_the_case_ids_and_runs_nothing(tmp_path, capsys):
    code = cli.main(["validate", "--scenario-root", SCENARIOS, "--launcher", "cpu", "--scenario", "tiny*",
                     "-k", "not hang", "--world", "2", "--collect-only", "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[:2] == ["markov_sharded/tiny[world=2,launcher=cpu]", "markov_sharded/tiny_crash[world=2,launcher=cpu]"]
    assert out[2].startswith("# 2 case(s) selected; selected 2 of 3 ")
    assert not (tmp_path / "run").exists()


def test_collect_only_of_an_empty_selection_exits_2_with_the_reason(capsys):
    assert cli.main(["validate", "--scenario-root", SCENARIOS, "--launcher", "cpu", "-k", "nothing_is_named_so",
                     "--collect-only"]) == 2
    assert capsys.readouterr().out == "# no case selected: no planned case matches -k 'nothing_is_named_so'\n"


def test_last_report_without_lf_is_refused(capsys):
    assert cli.main(["validate", "--scenario-root", SCENARIOS, "--last-report", "x.json"]) == 2
    assert "--last-report PATH names the report --lf reads" in capsys.readouterr().err


def test_exitfirst_starts_no_unit_after_the_first_failure_and_names_the_cases_not_run(monkeypatch, tmp_path,
                                                                                       capsys):
    failing_first, started = fake_runner(["fail"])  # the first case fails, every later one passes
    monkeypatch.setattr("harness.validate.JobRunner", failing_first)
    code = cli.main(["validate", "--scenario-root", SCENARIOS, "--launcher", "cpu", "--scenario", "tiny",
                     "--run-dir", str(tmp_path), "--no-store", "--no-cache", "--jobs", "1", "-x"])
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "report.json").read_text())
    assert code == 1 and started == [("markov_sharded/tiny", 1)]
    assert [r["case_id"] for r in doc["results"]] == ["markov_sharded/tiny[world=1,launcher=cpu]"]
    assert ("# -x: stopped after the first failure; 3 planned case(s) not run: markov_sharded/tiny[world=2,"
            "launcher=cpu], markov_sharded/tiny[world=4,launcher=cpu], markov_sharded/tiny[world=8,launcher=cpu]"
            in out)
    assert "# Cases : 1 of 4" in out and "# Result : FAILED" in out


def test_the_case_words_are_the_names_pytest_matches_plus_the_case_id():
    (case,) = [c for c in discover(SCENARIOS) if c.name == "tiny"]
    assert case_words(case, 4, "cpu") == ("markov_sharded", "tiny", "tiny.yaml", "scenarios", "world=4", "cpu",
                                          "markov_sharded/tiny[world=4,launcher=cpu]")
