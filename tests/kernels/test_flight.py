"""kernels.flight on the CPU: the record and header layout, ring files, and the reader's first divergence."""

from __future__ import annotations

import os
import struct

import pytest

from kernels import flight
from kernels.flight import FlightRecorder, LaunchRecord


def _record(launch: int, *, kernel: str = "sample", tag: int | None = None, rows: int = 4, status: str = "ended",
            family: str = "markov_sharded", protocol: str = "none", digest: int = 0x1234) -> LaunchRecord:
    """A record of ``launch`` with the fields a lockstep run gives every rank."""
    return LaunchRecord(launch=launch & 0xFFFFFFFF, family=family, kernel=kernel, protocol=protocol,
                        tag=(1 + launch % 32767) if tag is None else tag, parity=launch & 1, rows=rows, steps=3,
                        digest=digest, ctas=66, start_ns=10_000 + launch, aux=0, status=status,
                        end_ns=None if status == "begun" else 20_000 + launch)


def _rings(tmp_path, launches_per_rank: dict[int, list[LaunchRecord]], capacity: int = 8,
           family: str = "markov_sharded") -> list[flight.Ring]:
    """One ring file per rank, written from the host as the device would, read back from the files."""
    rings = []
    for rank, records in launches_per_rank.items():
        recorder = FlightRecorder(family, rank=rank, world=len(launches_per_rank), capacity=capacity,
                                  directory=tmp_path, name=f"{family}.0")
        for record in records:
            recorder.write(record)
        rings.append(flight.read_ring(recorder.path))
    return rings


def test_record_words_round_trip_and_offsets_match_the_documented_layout():
    record = _record(0x1_0000_0005, status="timed out")
    words = flight.encode_record(record)
    assert len(struct.pack("<16I", *words)) == flight.RECORD_BYTES == 64
    assert words[0] == 5  # launch at byte 0 (uint32)
    assert words[1] == 1 | 0 << 8 | 0 << 16 | 1 << 24  # family, kernel, protocol, version
    assert words[flight.W_END_STATUS] == flight.STATUS_TIMED_OUT and words[flight.W_END_LAUNCH] == 5
    assert words[flight.W_CHECK] == flight.checksum(words[:11])
    assert flight.decode_record(words) == record
    assert flight.decode_record([0] * 16) is None


def test_an_end_of_an_earlier_lap_does_not_end_the_slots_new_launch():
    old = flight.encode_record(_record(3))
    new = flight.encode_record(_record(3 + 8, status="begun"))
    new[12:16] = old[12:16]  # the slot's end words still hold launch 3's end
    assert flight.decode_record(new).status == "begun"


def test_a_half_written_begin_reads_as_torn():
    words = flight.encode_record(_record(7))
    words[flight.W_ROWS] += 1
    assert flight.decode_record(words).torn


def test_digest_is_fnv1a_of_32_bit_words():
    assert flight.digest([]) == 0x811C9DC5
    # FNV-1a of the single byte-like word 0x61 ('a') is the classic 0xE40C292C.
    assert flight.digest([0x61]) == 0xE40C292C
    assert flight.digest([1, 2]) != flight.digest([2, 1])


def test_header_names_the_instance_and_rejects_foreign_files(tmp_path):
    recorder = FlightRecorder("allreduce_mhc", rank=2, world=4, capacity=16, directory=tmp_path, name="ar.0")
    ring = flight.read_ring(recorder.path)
    assert (ring.header.family, ring.header.rank, ring.header.world, ring.header.capacity, ring.header.name) == (
        "allreduce_mhc", 2, 4, 16, "ar.0")
    assert recorder.path.stat().st_size == 64 + 16 * 64
    bad = tmp_path / "x.ring"
    bad.write_bytes(b"\0" * 128)
    with pytest.raises(flight.FlightFormatError, match="x.ring: magic"):
        flight.read_ring(bad)
    rings, problems = flight.read_directory(tmp_path)
    assert [r.header.name for r in rings] == ["ar.0"] and len(problems) == 1 and "x.ring" in problems[0]


@pytest.mark.parametrize("capacity", [3, 0, True])
def test_capacity_must_be_a_power_of_two(tmp_path, capacity):
    with pytest.raises(ValueError, match="capacity"):
        FlightRecorder("markov_fused", rank=0, world=1, capacity=capacity, directory=tmp_path)


def test_agreeing_ranks_give_a_consistent_finding(tmp_path):
    rings = _rings(tmp_path, {r: [_record(n) for n in range(20)] for r in range(2)})
    (finding,) = flight.first_divergence(rings)
    assert finding.consistent and finding.launch == 19 and finding.rank is None


def test_a_rank_that_launched_once_fewer_is_named_with_the_launch(tmp_path):
    full = [_record(n) for n in range(12)] + [_record(12, status="begun")]
    short = [_record(n) for n in range(12)]
    (finding,) = flight.first_divergence(_rings(tmp_path, {0: full, 1: short, 2: full}))
    assert (finding.rank, finding.launch, finding.kernel, finding.consistent) == (1, 12, "sample", False)
    assert "never began" in finding.what and "rank(s) 0, 2" in finding.what


def test_a_field_that_differs_is_named(tmp_path):
    ranks = {0: [_record(n) for n in range(6)], 1: [_record(n, rows=5 if n == 4 else 4) for n in range(6)]}
    (finding,) = flight.first_divergence(_rings(tmp_path, ranks))
    assert (finding.rank, finding.launch) == (1, 4)
    assert finding.what == "differs from rank 0: rows 5 vs 4"


def test_a_rank_that_began_and_did_not_end_while_others_ended(tmp_path):
    ranks = {0: [_record(n) for n in range(6)], 1: [_record(n, status="begun" if n == 5 else "ended")
                                                     for n in range(6)]}
    (finding,) = flight.first_divergence(_rings(tmp_path, ranks))
    assert (finding.rank, finding.launch) == (1, 5) and "not ended" in finding.what


def test_every_rank_inside_the_same_launch(tmp_path):
    ranks = {r: [_record(n, status="begun" if n == 3 else "ended") for n in range(4)] for r in range(2)}
    (finding,) = flight.first_divergence(_rings(tmp_path, ranks))
    assert (finding.rank, finding.launch, finding.consistent) == (0, 3, False)
    assert "none ended" in finding.what


def test_ring_wraparound_compares_only_launches_every_ring_still_holds(tmp_path):
    # capacity 8: rank 0 holds 32..39, rank 1 (stuck after 35) holds 28..35.
    ranks = {0: [_record(n) for n in range(40)], 1: [_record(n) for n in range(36)]}
    rings = _rings(tmp_path, ranks, capacity=8)
    assert sorted(r.launch for r in rings[0].records) == list(range(32, 40))
    (finding,) = flight.first_divergence(rings)
    assert (finding.rank, finding.launch) == (1, 36)


def test_counter_wraparound_orders_launches_across_zero(tmp_path):
    launches = [(0xFFFFFFFF - 5 + n) & 0xFFFFFFFF for n in range(10)]  # ..., 0xFFFFFFFF, 0, 1, 2, 3
    ranks = {0: [_record(n) for n in launches], 1: [_record(n) for n in launches[:-2]]}
    (finding,) = flight.first_divergence(_rings(tmp_path, ranks, capacity=16))
    assert (finding.rank, finding.launch) == (1, 2)


def test_a_missing_ring_names_the_rank(tmp_path):
    recorder = FlightRecorder("markov_sharded", rank=0, world=2, capacity=4, directory=tmp_path, name="s.0")
    recorder.write(_record(0))
    (finding,) = flight.first_divergence([flight.read_ring(recorder.path)])
    assert finding.rank == 1 and "no ring" in finding.what


def test_instances_are_compared_separately_and_divergent_first(tmp_path):
    good = _rings(tmp_path / "a", {r: [_record(n) for n in range(3)] for r in range(2)})
    bad = _rings(tmp_path / "b", {0: [_record(n, family="allreduce_mhc", kernel="consumer", protocol="ll")
                                      for n in range(3)],
                                  1: [_record(n, family="allreduce_mhc", kernel="consumer", protocol="bt")
                                      for n in range(3)]}, family="allreduce_mhc")
    findings = flight.first_divergence(good + bad)
    assert [f.family for f in findings] == ["allreduce_mhc", "markov_sharded"]
    assert findings[0].what == "differs from rank 0: protocol bt vs ll" and findings[1].consistent


def test_collect_replaces_a_link_by_the_shared_memory_files_bytes(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    recorder = FlightRecorder("markov_sharded", rank=0, world=1, capacity=4, directory=shm, name="s.0")
    recorder.write(_record(1))
    case = tmp_path / "case"
    case.mkdir()
    link = case / recorder.path.name
    link.symlink_to(recorder.path)
    assert flight.collect(case) == [link]
    assert not link.is_symlink() and not recorder.path.exists()
    assert [r.launch for r in flight.read_ring(link).records] == [1]


def test_instance_names_count_per_family_rank_and_directory(tmp_path):
    first = flight.instance_name("markov_fused", 901, tmp_path)
    assert first == "markov_fused.0"
    assert flight.instance_name("markov_fused", 901, tmp_path) == "markov_fused.1"
    assert flight.instance_name("markov_fused", 902, tmp_path) == first  # another rank's first is named alike
    assert flight.instance_name("markov_fused", 901, tmp_path / "next_case") == first


def test_a_dropped_recorder_is_retired_then_released_at_a_safe_point_and_the_file_keeps_the_records(tmp_path):
    import gc

    flight.release_retired()
    recorder = FlightRecorder("markov_sharded", rank=0, world=1, capacity=4, directory=tmp_path, name="s.0")
    recorder.write(_record(2))
    backing, path = recorder.backing, recorder.path
    del recorder
    gc.collect()
    # Dropping makes no CUDA call (a finalizer may run in any thread, while a peer's exchange spins): the mapping
    # waits for release_retired, which a new ring's registration or an owner at a safe point calls.
    assert not backing.closed
    assert flight.release_retired() == 1
    assert backing.closed
    assert [r.launch for r in flight.read_ring(path).records] == [2]


def test_the_default_directory_is_per_job(monkeypatch):
    monkeypatch.delenv(flight.DIRECTORY_VAR, raising=False)
    monkeypatch.setenv(flight.RUN_ID_VAR, "job-a")
    first = flight.default_directory()
    monkeypatch.setenv(flight.RUN_ID_VAR, "job-b")
    assert first.name == "job-a" and flight.default_directory().name == "job-b"
    assert first.parent == flight.default_directory().parent
    monkeypatch.delenv(flight.RUN_ID_VAR)
    assert flight.default_directory().name == f"pid{os.getpid()}"
    monkeypatch.setenv(flight.DIRECTORY_VAR, "/somewhere/rings")
    assert str(flight.default_directory()) == "/somewhere/rings"
