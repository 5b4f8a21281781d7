"""harness.launch.flight_evidence on the CPU: a case's rings (written from the host as kernels would) in its diagnosis."""

from __future__ import annotations

from kernels import flight
from kernels.flight import FlightRecorder, LaunchRecord

from harness.launch import flight_evidence
from harness.launch.diagnosis import diagnose
from harness.wire.worker_evidence import flight_directory, use_case_directory


def _record(launch: int, status: str = "ended") -> LaunchRecord:
    """A sampler launch record as every rank of a lockstep run writes it."""
    return LaunchRecord(launch=launch, family="markov_sharded", kernel="sample", protocol="none", tag=1 + launch,
                        parity=launch & 1, rows=2, steps=4, digest=7, ctas=8, start_ns=launch, aux=0, status=status,
                        end_ns=None if status == "begun" else launch + 1)


def _write_rings(case_dir, launches: dict[int, int]) -> None:
    """One ring per rank in the case's flight directory, rank r having made ``launches[r]`` launches."""
    for rank, count in launches.items():
        recorder = FlightRecorder("markov_sharded", rank=rank, world=len(launches), capacity=16,
                                  directory=flight_directory(case_dir), name="markov_sharded.0")
        for n in range(count):
            recorder.write(_record(n, "begun" if n == count - 1 and count > min(launches.values()) else "ended"))


def test_a_rank_that_made_one_launch_fewer_is_named_in_the_diagnosis(tmp_path):
    _write_rings(tmp_path, {0: 5, 1: 4})
    progress = {0: [{"event": "begin", "launch": 0}], 1: [{"event": "begin", "launch": 0}]}
    diagnosis = flight_evidence.attach(diagnose(progress), tmp_path)
    assert diagnosis.rank == 1 and diagnosis.cause == "flight"
    assert "flight recorder, markov_sharded.0: rank 1 launch 4 (sample): no record" in diagnosis.text
    assert diagnosis.flight[0]["launch"] == 4 and diagnosis.to_json()["flight"] == diagnosis.flight


def test_the_progress_records_blame_stays_when_they_named_a_rank(tmp_path):
    _write_rings(tmp_path, {0: 5, 1: 4})
    progress = {0: [{"event": "begin", "launch": 0}, {"event": "begin", "launch": 1}],
                1: [{"event": "begin", "launch": 0}]}
    diagnosis = flight_evidence.attach(diagnose(progress), tmp_path)
    assert diagnosis.rank == 1 and diagnosis.cause == "behind" and "flight recorder" in diagnosis.text


def test_agreeing_rings_add_a_consistent_finding_and_leave_the_text(tmp_path):
    _write_rings(tmp_path, {0: 3, 1: 3})
    before = diagnose({0: [], 1: []})
    text = before.text
    after = flight_evidence.attach(before, tmp_path)
    assert after.text == text and after.rank is None
    assert [f["consistent"] for f in after.flight] == [True]


def test_an_unreadable_ring_is_reported_not_fatal(tmp_path):
    directory = flight_directory(tmp_path)
    directory.mkdir()
    (directory / "junk.ring").write_bytes(b"x" * 10)
    found = flight_evidence.findings(tmp_path)
    assert len(found) == 1 and "junk.ring" in found[0]["problem"]


def test_a_case_without_rings_adds_nothing(tmp_path):
    diagnosis = flight_evidence.attach(diagnose({}), tmp_path)
    assert diagnosis.flight == []


def test_use_case_directory_makes_this_threads_new_rings_land_in_the_case(tmp_path):
    import threading

    seen = {}

    def other_group():
        """Another virtual rank's thread, of another group's case."""
        use_case_directory(tmp_path / "other")
        seen["other"] = FlightRecorder("allreduce_mhc", rank=0, world=1, capacity=2).path.parent

    try:
        use_case_directory(tmp_path)
        thread = threading.Thread(target=other_group)
        thread.start()
        thread.join()
        recorder = FlightRecorder("allreduce_mhc", rank=0, world=1, capacity=2)
        assert recorder.path.parent == tmp_path / "flight"
        assert seen["other"] == tmp_path / "other" / "flight"
    finally:
        flight.set_directory(None, this_thread=True)


def test_rankcheck_reads_a_jobs_rings_from_its_directory(tmp_path):
    import rankcheck

    _write_rings(tmp_path, {0: 3, 1: 2})
    found, problems = rankcheck.flight_findings(flight_directory(tmp_path))
    assert problems == [] and [(f.rank, f.launch) for f in found] == [(1, 2)]


def test_two_rings_of_one_rank_for_one_instance_are_a_problem_not_a_crash(tmp_path):
    _write_rings(tmp_path, {0: 2, 1: 2})
    extra = FlightRecorder("markov_sharded", rank=1, world=2, capacity=16,
                           directory=flight_directory(tmp_path) / "again", name="markov_sharded.0")
    extra.write(_record(0))
    (found,) = flight_evidence.findings(tmp_path)
    assert "a second ring of rank 1" in found["problem"]


def test_keep_moves_a_cases_rings_out_of_shared_memory(tmp_path):
    shm = tmp_path / "shm"
    recorder = FlightRecorder("markov_sharded", rank=0, world=1, capacity=4, directory=shm, name="markov_sharded.0")
    recorder.write(_record(0))
    link = flight_directory(tmp_path / "case") / recorder.path.name
    link.parent.mkdir(parents=True)
    link.symlink_to(recorder.path)
    assert flight_evidence.keep(tmp_path / "case") == []
    assert not link.is_symlink() and not recorder.path.exists()
    assert flight_evidence.keep(tmp_path / "no_such_case") == []
