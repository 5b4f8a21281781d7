"""Turning one case's per-rank results and progress records into a verdict.

Inputs: the ``Case`` (expected outcome), the per-rank result files that
exist, the progress records, and how the job ended for this case
(``completed``: every rank wrote its result; ``timeout``: the watchdog ended
the job while the case ran; ``exit``: a rank or the agent exited first).

- expected ``golden``: pass when every rank's outputs equal the reference
  bit for bit at every launch, every ``bad_input`` call was refused with the
  expected error and left the state unchanged, no call that should have
  been refused was accepted, and every call ran the protocol it names or
  implies (``RankResult.protocol_mismatches``); a timeout or exit is reported with the
  watchdog's diagnosis (which rank fell behind, at which launch).
- expected ``error``: pass when the expected exception (type or a base
  class, message regex; on the named rank when one is given) was raised.
- expected ``timeout``: pass when the case did not complete and the
  diagnosis names the expected rank and launch. On the golden path a
  skipped or repeated launch is detected at the next exchange (the ranks'
  calls disagree) rather than by a deadline; that also passes when the
  diagnosis from the progress records names the same rank and launch.
Several expected outcomes (``[error, timeout]``) pass when any one holds.

A scenario that asks for CUDA graphs (``graph_verdict``): bits that equal
the reference still FAIL when a rank's system could not be captured (it ran
eagerly: what the scenario names was not tested), and are NOT-AVAILABLE
when the platform has no CUDA graphs (the golden implementation on the
CPU); wrong bits fail either way. Every verdict carries the graph counts
(``graph_counts``: graphs captured and replays over the ranks).

A case that did not complete carries its evidence in the detail, after the
diagnosis: the innermost Python frames of the rank that fell behind, every
rank's log path and any NCCL flight-recorder dumps (``harness.launch.evidence``).
"""

from __future__ import annotations

import re
from typing import Mapping

from harness.launch.evidence import short_frame
from harness.launch.records import CaseEnd
from harness.wire.phases import slowest
from harness.wire.rank_result import RankResult
from harness.wire.case_result import CaseResult
from harness.launch.diagnosis import Diagnosis

# How many of the laggard's innermost frames a verdict's detail shows (the diagnosis keeps more).
DETAIL_FRAMES = 4


def _first_error(results: Mapping[int, RankResult]) -> tuple[int, dict] | None:
    """The lowest rank's unexpected error, as (rank, error dict)."""
    for rank in sorted(results):
        if results[rank].failed:
            return rank, results[rank].error
    return None


def _error_matches(error: dict, expected: dict) -> bool:
    """Whether a recorded error is the expected one (type name and message regex)."""
    if expected["type"] not in error.get("types", [error.get("type")]):
        return False
    return re.search(expected["match"], error.get("message", "")) is not None


def _diagnosis_text(diagnosis: Diagnosis | None) -> str:
    """The diagnosis followed by its evidence: the laggard's innermost frames (each rank's innermost one when no rank fell behind), every rank's log, the NCCL dumps and who else held the GPU at the deadline."""
    if diagnosis is None:
        return "no diagnosis"
    parts = [diagnosis.text]
    frames = diagnosis.stacks.get(diagnosis.rank) if diagnosis.rank is not None else None
    if frames:
        parts.append(f"rank {diagnosis.rank} stack, innermost first: "
                     + " < ".join(short_frame(f) for f in frames[:DETAIL_FRAMES]))
    elif diagnosis.stacks:
        parts.append("innermost frames: " + ", ".join(f"rank {r} {short_frame(f[0])}"
                                                      for r, f in sorted(diagnosis.stacks.items()) if f))
    if diagnosis.logs:
        parts.append("logs: " + ", ".join(f"rank {r} {p}" for r, p in sorted(diagnosis.logs.items())))
    if diagnosis.nccl_dumps:
        parts.append("NCCL flight recorder dumps: " + ", ".join(diagnosis.nccl_dumps))
    if diagnosis.gpu_processes:
        parts.append(diagnosis.gpu_processes)
    return "; ".join(parts)


def _names_expected(diagnosis: Diagnosis | None, want: dict | None) -> bool:
    """Whether the diagnosis names the expected timeout's rank and launch."""
    return (diagnosis is not None and want is not None and diagnosis.rank == want["rank"]
            and diagnosis.launch == want["launch"])


def _expected_error_rank(results: Mapping[int, RankResult], want: dict | None) -> int | None:
    """The rank whose recorded error is the expected one (the named rank only, when one is named)."""
    if not want:
        return None
    ranks = [want["rank"]] if want.get("rank") is not None else sorted(results)
    for rank in ranks:
        res = results.get(rank)
        if res is not None and res.failed and _error_matches(res.error, want):
            return rank
    return None


def _bits_verdict(results: Mapping[int, RankResult], world: int) -> tuple[str, str, int, list, int]:
    """(status, detail, mismatch count, first mismatches, max ulps) of completed golden results."""
    count, first, max_ulps = 0, [], 0
    problems = []
    for rank in sorted(results):
        res = results[rank]
        comp = res.comparison or {}
        count += int(comp.get("mismatch_count", 0))
        max_ulps = max(max_ulps, int(comp.get("max_ulps", 0)))
        first.extend(comp.get("first", [])[: max(0, 8 - len(first))])
        for r in res.refused:
            if not r["matched"]:
                problems.append(f"rank {rank} launch {r['launch']}: refused with {r['type']}: {r['message'][:200]} "
                                f"(expected {r['expected']['type']} /{r['expected']['match']}/)")
            elif not r["state_unchanged"]:
                problems.append(f"rank {rank} launch {r['launch']}: refused but state changed "
                                f"{r['state_before']} -> {r['state_after']}")
        for r in res.not_refused:
            problems.append(f"rank {rank} launch {r['launch']}: accepted a bad input "
                            f"(expected {r['expected']['type']} /{r['expected']['match']}/)")
        for r in res.protocol_mismatches:
            problems.append(f"rank {rank} launch {r['launch']}: {r['problem']}")
    discarded = _discarded_note(results)
    if problems:
        return "fail", "; ".join(problems) + discarded, count, first, max_ulps
    if count:
        return "fail", f"{count} mismatching elements" + discarded, count, first, max_ulps
    launches = max((r.launches_done for r in results.values()), default=0)
    refused = sum(len(r.refused) for r in results.values())
    detail = f"bits equal over {launches} launches on {len(results)} ranks"
    if len(results) < world:
        detail += f" (the {len(results)} of {world} ranks whose results this node holds)"
    if refused:
        detail += f", {refused} bad calls refused as expected"
    if max_ulps:
        detail += f" (max {max_ulps} ulps within the declared tolerance)"
    status, graph = graph_verdict(results)
    if status is not None:
        return status, f"{graph}; {detail}", 0, first, max_ulps
    if graph:
        detail += f"; {graph}"
    return "pass", detail + discarded, 0, first, max_ulps


def _discarded_note(results: Mapping[int, RankResult]) -> str:
    """'; n bad reference cache entries discarded and recomputed (why)' over the ranks ('' when none)."""
    refs = [r.references or {} for r in results.values()]
    count = sum(int(r.get("discarded", 0)) for r in refs)
    if not count:
        return ""
    why = next((w[0] for r in refs if (w := r.get("discarded_why"))), "")
    return f"; {count} bad reference cache entr{'y' if count == 1 else 'ies'} discarded and recomputed" + \
        (f" ({why})" if why else "")


def graph_verdict(results: Mapping[int, RankResult]) -> tuple[str | None, str]:
    """(the status a graph scenario's capture imposes on equal bits, None when none; how the ranks ran its launches,
    '' when the scenario captures none): ``fail`` when a rank's system was not captured, ``not-available`` when the
    platform has no CUDA graphs."""
    notes = [r.graph for r in results.values() if r.graph]
    if not notes:
        return None, ""
    for mode, status, words in (("not-captured", "fail", "the scenario asks for CUDA graphs, not captured"),
                                ("not-available", "not-available", "CUDA graphs not available")):
        ranks = [rank for rank, r in sorted(results.items()) if r.graph and r.graph.get("mode") == mode]
        if ranks:
            return status, f"{words} (ranks {ranks}): {results[ranks[0]].graph.get('reason', '?')}"
    counts = graph_counts(results)
    return None, (f"CUDA graphs captured ({len(notes[0].get('labels', []))} labels, {counts['captured']} graphs "
                  f"over the ranks), {counts['replays']} replays")


def graph_counts(results: Mapping[int, RankResult]) -> dict | None:
    """The graphs the ranks captured and their replays, summed over the ranks (None when the scenario captures
    none): ``{"captured", "replays", "mode"}``, the mode the worst rank's (not-captured, not-available, captured)."""
    notes = [r.graph for r in results.values() if r.graph]
    if not notes:
        return None
    modes = {n.get("mode") for n in notes}
    mode = next((m for m in ("not-captured", "not-available") if m in modes), "captured")
    return {"mode": mode, "captured": sum(len(n.get("labels", [])) for n in notes if n.get("mode") == "captured"),
            "replays": sum(int(n.get("replays", 0)) for n in notes if n.get("mode") == "captured")}


def _describe_mismatch(m: dict) -> str:
    """One line for a mismatch dict written by harness.rank.compare."""
    loc = ", ".join(f"{k} {v}" for k, v in m.get("where", {}).items())
    launch = f"launch {m['launch']}, " if m.get("launch") is not None else ""
    return (f"rank {m['rank']}, {launch}{m['output']}[{loc}] (element {m['element']}): "
            f"got {m['actual_hex']} ({m['actual']}), "
            f"expected {m['expected_hex']} ({m['expected']})")


def judge(case, *, world: int, launcher: str, impl: str, group: int | None, results: Mapping[int, RankResult],
          end: CaseEnd, diagnosis: Diagnosis | None, time_s: float) -> CaseResult:
    """The verdict of one case in one TP group (ranks keyed by group rank)."""
    base = dict(family=case.family, scenario=case.name, world=world, launcher=launcher, impl=impl,
                expected=case.expected_text, group=group, time_s=time_s,
                diagnosis=diagnosis.to_json() if diagnosis else None,
                phases=slowest(r.phases for r in results.values()),
                facts=next((r.facts for r in results.values() if r.facts), None), graphs=graph_counts(results))
    unavailable = [r for r in results.values() if r.status == "not-available"]
    if unavailable:
        return CaseResult(status="not-available", detail=unavailable[0].error["message"], **base)
    outcomes = case.outcomes
    verdicts: list[tuple[str, str]] = []
    if not end.completed:
        what = _diagnosis_text(diagnosis)
        ended = diagnosis is not None and (diagnosis.cause == "crash" or not end.timed_out)
        if ended and diagnosis.rank is not None and diagnosis.rank not in results:
            # a rank that ended without a result (exit, signal) is an error of that rank
            results = dict(results)
            results[diagnosis.rank] = RankResult(status="error", error={
                "type": "RuntimeError", "types": ["RuntimeError", "Exception"], "phase": "exit",
                "message": f"rank {diagnosis.rank} ended without a result (the launcher exited with code "
                           f"{end.returncode}): {what}"})
        cause = "timed out" if end.timed_out else f"ended early (exit code {end.returncode})"
        if "timeout" in outcomes and case.expect_timeout and diagnosis is not None:
            want = case.expect_timeout
            if _names_expected(diagnosis, want):
                return CaseResult(status="pass", detail=f"{cause} as expected: {what}", **base)
            verdicts.append(("fail", f"{cause}: {what}; expected rank {want['rank']} at launch {want['launch']}"))
        err = _first_error(results)
        hit = _expected_error_rank(results, case.expect_error) if "error" in outcomes else None
        if hit is not None:
            e = results[hit].error
            return CaseResult(status="pass", detail=f"rank {hit}: {e['type']} as expected: {e['message'][:200]}",
                              **base)
        if verdicts:
            return CaseResult(status=verdicts[0][0], detail=verdicts[0][1], **base)
        if err is not None:
            return CaseResult(status="error", detail=f"rank {err[0]}: {err[1]['type']}: {err[1]['message'][:300]}; "
                              f"job {cause}: {what}", **base)
        status = "timeout" if end.timed_out else "error"
        return CaseResult(status=status, detail=f"{cause}: {what}", **base)
    if "error" in outcomes:
        raised = {r: res.error for r, res in results.items() if res.failed}
        hit = _expected_error_rank(results, case.expect_error)
        if hit is not None:
            e = raised[hit]
            return CaseResult(status="pass", detail=f"rank {hit} raised {e['type']}: {e['message'][:200]}", **base)
        got = "; ".join(f"rank {r}: {e['type']}: {e['message'][:150]}" for r, e in sorted(raised.items()))
        return CaseResult(status="fail", detail=f"expected {case.expected_text}; got {got or 'no error'}", **base)
    err = _first_error(results)
    if err is not None and "timeout" in outcomes and _names_expected(diagnosis, case.expect_timeout):
        rank, e = err
        return CaseResult(status="pass", detail=f"desynchronisation named as expected ({diagnosis.text}); detected "
                          f"at the next exchange by rank {rank}: {e['type']}: {e['message'][:200]}", **base)
    if err is not None:
        rank, e = err
        return CaseResult(status="error", detail=f"rank {rank} ({e.get('phase', '?')}): {e['type']}: {e['message'][:300]}",
                          **base)
    if "timeout" in outcomes:
        return CaseResult(status="fail", detail=f"expected {case.expected_text}, but every rank completed", **base)
    status, detail, count, first, max_ulps = _bits_verdict(results, world)
    return CaseResult(status=status, detail=detail, mismatch_count=count,
                      first_mismatch=_describe_mismatch(first[0]) if first else "",
                      mismatches=[_describe_mismatch(m) for m in first], max_ulps=max_ulps, **base)
