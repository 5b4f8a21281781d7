"""``harness.scale``: the nightly shape per world, what a world's run must show, and its table and plot.

The process path (agents, merge, measurement from the files) runs in
``test_nightly.py``'s 8 x 4 test; here the shapes (agents of 4, TP 4 where
it divides, the hang in the middle group), the checks that decide the exit
code, and the summary from a result document.
"""

import pytest

from harness.scale.__main__ import checks
from harness.scale.nightly import one_host_env, shape_of
from harness.scale.summary import markdown, plot, rows_of, write_summary


def test_the_nightly_shape_at_each_world():
    assert [(s.nodes, s.per_node, s.tp, s.groups, s.hang_group) for s in map(shape_of, (2, 8, 32, 72))] == [
        (1, 2, 2, 1, 0), (2, 4, 4, 2, 1), (8, 4, 4, 8, 4), (18, 4, 4, 18, 9)]
    assert shape_of(8, hang_group=None).hang_group is None
    with pytest.raises(ValueError, match="--hang-group 2: world 8 at tp 4 has groups 0..1"):
        shape_of(8, hang_group=2)
    with pytest.raises(ValueError, match="world 6 is not a whole number of agents of 4"):
        shape_of(6)


def test_the_simulated_nodes_share_the_hosts_cores_and_touch_no_gpu(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    env = one_host_env(72, RANKCHECK_CACHE_DIR="/c")
    assert (env["OMP_NUM_THREADS"], env["CUDA_VISIBLE_DEVICES"], env["RANKCHECK_CACHE_DIR"]) == ("1", "", "/c")
    assert one_host_env(4)["OMP_NUM_THREADS"] == "4"  # 16 cores among 4 ranks, not 4 per node times the nodes


def world(failing=(9,), passing=17, named_after=7.0, top_group=9, left=()) -> dict:
    """A measured 72-rank world as ``world_costs`` gives it (with the driver's wall time)."""
    return {"world": 72, "wall_s": 100.0, "processes_left": list(left),
            "agents": {"timed_out": False, "leftovers": [], "returncodes": {}},
            "shape": {"world": 72, "nodes": 18, "per_node": 4, "tp": 4},
            "memory": {"rank_hwm_max_mib": 300.0},
            "verdicts": {"groups_failing": list(failing), "groups_all_pass": passing,
                         "top_diagnosis": {"group": top_group}},
            "jobs": [{"rendezvous_s": 9.0, "import_s": 6.0, "setup_s": 0.1, "overhead_s": {"median": 0.2},
                      "verdict_latency_s": {"median": 0.1}, "teardown_s": {"median": 2.0}, "linger_s": {}},
                     {"hang_named_after_s": named_after, "linger_s": {"max": 5.0}}]}


def test_a_world_that_shows_what_the_nightly_must_passes_every_check():
    assert checks(world(), shape_of(72), deadline_s=5) == []


@pytest.mark.parametrize("measured, needle", [
    (world(failing=(9, 3), passing=16), "failing groups [9, 3], expected [9]"),
    (world(named_after=15.5), "named 15.5 s after its hang, more than 15 s"),
    (world(top_group=3), "not group 9's"),
    (world(left=("python -m harness.rank.worker",)), "processes left"),
])
def test_a_world_that_misses_any_of_it_says_what(measured, needle):
    assert any(needle in miss for miss in checks(measured, shape_of(72), deadline_s=5))


def test_the_summary_has_a_row_per_world_from_every_document_and_a_plot(tmp_path):
    here = {"host": {"host": "ci", "cores": 2}, "command": "c", "worlds": [world() | {"world": 8}]}
    there = {"host": {"host": "gpu", "cores": 16}, "command": "c", "worlds": [world(), {"world": 32, "skipped": "x"}]}
    rows = rows_of([here, there])
    assert [(r["world"], r["host"], r["groups"]) for r in rows] == [(8, "ci (2)", "17 / 1"), (72, "gpu (16)", "17 / 1")]
    table = markdown(rows)
    assert "| 72 | 18 x 4, tp 4 | gpu (16) | 9.0 | 6.0 | 0.1 | 0.2 | 0.1 | 2.0 | 7.0 | 5.0 | 100.0 | 300.0 |" in table
    assert write_summary([here, there], tmp_path)[1] == f"plot {tmp_path / 'scale.png'}"
    assert (tmp_path / "scale.png").stat().st_size > 1000
    assert (tmp_path / "scale.md").read_text().count("\n| ") == 4  # head, rule, 2 rows
    assert plot(rows, tmp_path / "again.png").startswith("plot ")
