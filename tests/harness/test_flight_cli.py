"""``rankcheck flight DIR`` on the CPU: rings written from the host (``FlightRecorder(device=None)``) as the kernels
write them, read back by the command: its lines, its JSON and its exit codes (0 consistent, 1 a divergence, 2 none
or unreadable)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kernels.flight import FlightRecorder, LaunchRecord

from harness.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _record(family: str, kernel: str, launch: int, status: str = "ended", rows: int = 4) -> LaunchRecord:
    """A launch record as every rank of a lockstep job writes it (``rows`` may be planted to differ)."""
    return LaunchRecord(launch=launch, family=family, kernel=kernel, protocol="none", tag=launch + 1,
                        parity=launch & 1, rows=rows, steps=4, digest=0x1234, ctas=8, start_ns=10 * launch, aux=0,
                        status=status, end_ns=None if status == "begun" else 10 * launch + 5)


def _rings(directory: Path, family: str, kernel: str, launches: dict[int, int], *, waiting: bool = True,
           rows: dict[int, int] | None = None) -> None:
    """One ring per rank of one instance, rank r having begun ``launches[r]`` launches; with ``waiting`` the ranks
    ahead have not ended their last one (they wait inside it for the rank behind)."""
    behind = min(launches.values())
    for rank, count in launches.items():
        ring = FlightRecorder(family, rank=rank, world=len(launches), capacity=16, directory=directory,
                              name=f"{family}.0")
        for n in range(count):
            status = "begun" if waiting and n == count - 1 and count > behind else "ended"
            ring.write(_record(family, kernel, n, status, (rows or {}).get(rank, 4)))


def _flight(directory: Path, *extra: str, capsys) -> tuple[int, str]:
    """``rankcheck flight DIR`` in this process: (exit code, stdout)."""
    code = main(["flight", str(directory), *extra])
    return code, capsys.readouterr().out


def test_a_rank_that_never_began_a_launch_is_named_with_exit_1(tmp_path, capsys):
    _rings(tmp_path, "allreduce_mhc", "publish", {0: 7, 1: 6, 2: 7, 3: 7})
    _rings(tmp_path, "markov_sharded", "sample", {0: 3, 1: 3, 2: 3, 3: 3})
    code, out = _flight(tmp_path, capsys=capsys)
    assert code == 1, out
    lines = out.splitlines()
    assert lines[0] == f"8 ring(s) of 2 instance(s) from rank(s) 0, 1, 2, 3 under {tmp_path}"
    assert lines[1].startswith("DIVERGENCE: flight recorder, allreduce_mhc.0: rank 1 launch 6 (publish): "
                               "no record (never began it) while rank(s) 0, 2, 3 began"), out
    assert lines[2].startswith("consistent: flight recorder, markov_sharded.0: every rank's records agree up to "
                               "launch 2"), out
    assert lines[-1] == "flight: a divergence is named (exit 1)"


def test_a_field_that_differs_is_named(tmp_path, capsys):
    _rings(tmp_path, "markov_sharded", "sample", {0: 3, 1: 3}, rows={1: 2})
    code, out = _flight(tmp_path, capsys=capsys)
    assert code == 1 and "rank 1 launch 0 (sample): differs from rank 0: rows 2 vs 4" in out, out


def test_agreeing_rings_exit_0_and_the_json_says_the_same(tmp_path, capsys):
    rings = tmp_path / "rings"
    _rings(rings / "job", "markov_fused", "step", {0: 5, 1: 5})
    report = tmp_path / "flight.json"
    code, out = _flight(rings, "--json", str(report), capsys=capsys)
    assert code == 0, out
    document = json.loads(report.read_text())
    assert document["format"] == "rankcheck-flight" and document["exit"] == 0 and document["problems"] == []
    assert len(document["rings"]) == 2 and all(Path(p).parent == rings / "job" for p in document["rings"])
    [finding] = document["findings"]
    assert finding["consistent"] is True and finding["instance"] == "markov_fused.0"
    assert finding["text"] in out


def test_a_divergence_still_names_an_unreadable_file_beside_it(tmp_path, capsys):
    _rings(tmp_path, "markov_sharded", "sample", {0: 3, 1: 2})
    (tmp_path / "torn.r0.ring").write_bytes(b"\0" * 12)
    code, out = _flight(tmp_path, capsys=capsys)
    assert code == 1, out
    assert "DIVERGENCE: flight recorder, markov_sharded.0: rank 1 launch 2" in out
    assert f"UNREADABLE: {tmp_path / 'torn.r0.ring'}: " in out
    assert "torn.r0.ring: 12 bytes, shorter than the 64-byte header" in out


def test_consistent_rings_beside_an_unreadable_file_exit_2(tmp_path, capsys):
    _rings(tmp_path, "markov_sharded", "sample", {0: 3, 1: 3})
    (tmp_path / "other.ring").write_bytes(b"not a ring at all, but long enough to hold a 64-byte header....." * 2)
    code, out = _flight(tmp_path, capsys=capsys)
    assert code == 2 and "UNREADABLE: " in out and "other.ring: magic" in out, out


def test_no_ring_or_no_directory_exits_2_naming_it(tmp_path, capsys):
    code, out = _flight(tmp_path, capsys=capsys)
    assert code == 2 and f"UNREADABLE: {tmp_path}: no flight-recorder ring (*.ring) under it" in out, out
    code, out = _flight(tmp_path / "absent", capsys=capsys)
    assert code == 2 and f"UNREADABLE: {tmp_path / 'absent'}: not a directory" in out, out


def test_two_rings_of_one_rank_are_named_not_judged(tmp_path, capsys):
    _rings(tmp_path / "first", "markov_sharded", "sample", {0: 3, 1: 3})
    _rings(tmp_path / "second", "markov_sharded", "sample", {0: 3})
    code, out = _flight(tmp_path, capsys=capsys)
    assert code == 2 and "a second ring of rank 0 for markov_sharded.0" in out, out


def test_a_link_to_a_ring_elsewhere_is_collected_into_the_directory(tmp_path, capsys):
    elsewhere, rings = tmp_path / "elsewhere", tmp_path / "rings"
    _rings(elsewhere, "markov_sharded", "sample", {0: 2, 1: 1}, waiting=False)
    rings.mkdir()
    for path in sorted(elsewhere.iterdir()):
        os.symlink(path, rings / path.name)
    code, out = _flight(rings, capsys=capsys)
    assert code == 1 and "rank 1 launch 1 (sample): no record" in out, out
    assert all(not p.is_symlink() for p in rings.iterdir()) and list(elsewhere.iterdir()) == []


def test_python_m_harness_flight_is_the_same_command(tmp_path):
    _rings(tmp_path, "allreduce_mhc", "publish", {0: 4, 1: 3})
    done = subprocess.run([sys.executable, "-m", "harness", "flight", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "rank 1 launch 3 (publish): no record" in done.stdout


def test_a_link_whose_ring_is_gone_is_named_unreadable(tmp_path, capsys):
    _rings(tmp_path / "rings", "markov_sharded", "sample", {0: 2, 1: 2})
    os.symlink(tmp_path / "gone.ring", tmp_path / "rings" / "markov_sharded.1.r0.p9.ring")
    code, out = _flight(tmp_path / "rings", capsys=capsys)
    assert code == 2, out
    link = tmp_path / "rings" / "markov_sharded.1.r0.p9.ring"
    assert f"UNREADABLE: {link}: a link to {tmp_path / 'gone.ring'}, which is gone" in out
