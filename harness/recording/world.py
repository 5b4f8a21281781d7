"""Reading a recorded world (``harness.recording.writer``'s layout) and finding where its ranks' calls disagree.

``load_world(directory)`` reads ``world.yaml`` and every rank's entry and
bundle (``scenarios.bundle.load_bundle``: safetensors only, every tensor
checked against its sha256); anything missing, malformed or tampered with is
a ``BundleError`` naming the file, before anything runs: every YAML file is
read through ``scenarios.data_files`` (capped, regular files only, no alias
bombs or duplicate keys), an entry's fields are type-checked and its
``launches`` must be strictly increasing. Each entry names
its bundle (``rank<k>`` or a version ``rank<k>.v<n>``, nothing else); an
entry whose recording is still ``running`` is a rank that was killed or
crashed, and ``RankRecord.ended`` says so with the last call it wrote.

``disagreements(world)`` compares the ranks' recorded calls without running
anything, the way ``harness.rank.agreement`` compares them live: calls are lined
up by their job-wide launch index, and each rank's call is described by its
rows, steps, params, and every input's dtype, shape and sha256 (every rank
passes the same full tensors, docs/interfaces.md). At the first launch where
descriptions differ, the rank(s) whose call is not the majority's (on a tie,
not rank 0's) are named with every field that differs, and, when the
deviating call is the reference rank's previous or next call, as a rank that
passed a call again or skipped one. Ranks that made different numbers of
calls are named too (a skipped call at the end of a window, a rank that
stopped early).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from golden.store import raw_sha256
from harness.recording.writer import RUNNING, WORLD_FORMAT, WORLD_MANIFEST, rank_dir_name, rank_entry_name
from scenarios.bundle import BundleError, load_bundle, read_yaml_mapping
from scenarios.fields import describe

SHOWN_FIELDS = 4
MAX_WORLD = 72  # the largest world a scenario may name (scenarios.schema)
WORLD_KEYS = ("format", "family", "config", "world", "versions", "start")


def first_line(text: object) -> str:
    """The first non-empty line of ``text`` (an exception names itself there; CUDA's errors append advice)."""
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


@dataclass
class RankRecord:
    """One rank's entry and bundle (None when the rank made no call)."""

    rank: int
    entry: dict
    bundle: Any = None

    @property
    def launches(self) -> list[int]:
        """The job-wide launch index of each call in the bundle."""
        return list(self.entry.get("launches") or [])

    def call(self, launch: int) -> tuple[dict, dict] | None:
        """This rank's recorded (inputs, params) of job-wide ``launch``, or None when it is not in the bundle."""
        if launch not in self.launches:
            return None
        return self.bundle.recorded_call(self.launches.index(launch), self.bundle.world)

    def describe(self, launch: int) -> dict[str, Any] | None:
        """This rank's call ``launch`` as comparable fields (``describe_call`` plus rows and steps), or None."""
        call = self.call(launch)
        if call is None:
            return None
        spec = self.bundle.calls[self.launches.index(launch)]
        shape = {"rows": spec.rows} if spec.steps is None else {"rows": spec.rows, "steps": spec.steps}
        return {**shape, **describe_call(call)}

    @property
    def ended(self) -> str:
        """How the recording ended; one still ``running`` is a rank that was killed or crashed (or still runs)."""
        ended = str(self.entry.get("ended"))
        last = self.entry.get("last_write")
        if ended != RUNNING:
            return first_line(ended) or ended
        if not isinstance(last, dict):
            return "killed or crashed: no call written"
        what = "its outputs" if last.get("outputs") else "its inputs, it had not returned"
        return f"killed or crashed: last write at call {last.get('launch')} ({what}); no orderly exit was recorded"

    def completed(self, launch: int) -> bool:
        """Whether this rank's call ``launch`` returned (the last one may have been in flight)."""
        return launch in self.launches and not (self.entry.get("in_flight") and launch == self.launches[-1])


@dataclass
class WorldRecording:
    """A recorded world: its manifest and every rank's record."""

    directory: Path
    manifest: dict
    ranks: list[RankRecord] = field(default_factory=list)

    @property
    def family(self) -> str:
        """The recorded family."""
        return self.manifest["family"]

    @property
    def world(self) -> int:
        """The recorded world size."""
        return int(self.manifest["world"])


def _read_yaml(path: Path) -> dict:
    """A YAML mapping read with ``safe_load`` (BundleError naming the file otherwise)."""
    return read_yaml_mapping(path, str(path))


def check_entry(entry: dict, shown: str) -> dict:
    """A rank's entry with typed fields: ``bundle`` a name or empty, ``launches`` strictly increasing, ``calls_made`` an int."""
    if entry.get("bundle") is not None and not isinstance(entry["bundle"], str):
        raise BundleError(f"{shown}: bundle: expected a bundle name, got {describe(entry['bundle'])}")
    launches = entry.get("launches") or []
    if not isinstance(launches, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                 for i in launches):
        raise BundleError(f"{shown}: launches: expected a list of launch indices (ints >= 0), got {describe(launches)}")
    repeated = next((b for a, b in zip(launches, launches[1:]) if b <= a), None)
    if repeated is not None:
        raise BundleError(f"{shown}: launches: expected strictly increasing launch indices, got {repeated} after a "
                          f"launch >= {repeated} in {describe(launches)}")
    made = entry.get("calls_made", 0)
    if isinstance(made, bool) or not isinstance(made, int) or made < 0:
        raise BundleError(f"{shown}: calls_made: expected an int >= 0, got {describe(made)}")
    if not isinstance(entry.get("in_flight", False), bool):
        raise BundleError(f"{shown}: in_flight: expected true or false, got {describe(entry['in_flight'])}")
    return entry


def bundle_name(entry: Mapping[str, Any], rank: int, root: Path) -> str:
    """The bundle directory ``rank``'s entry names: ``rank<k>`` or a version of it, never a path elsewhere."""
    name, mine = str(entry["bundle"]), rank_dir_name(rank)
    if not re.fullmatch(rf"{mine}(\.v[0-9]+)?", name):
        raise BundleError(f"{root / rank_entry_name(rank)}: bundle: expected {mine} or {mine}.v<n>, got {name!r}")
    return name


def load_world(directory: str | Path) -> WorldRecording:
    """Read and check the world recording at ``directory``."""
    root = Path(directory)
    manifest = _read_yaml(root / WORLD_MANIFEST)
    missing = [k for k in WORLD_KEYS if k not in manifest]
    if missing:
        raise BundleError(f"{root / WORLD_MANIFEST}: required keys missing: {missing}")
    if manifest["format"] != WORLD_FORMAT:
        raise BundleError(f"{root / WORLD_MANIFEST}: format: expected {WORLD_FORMAT}, got "
                          f"{describe(manifest['format'])}")
    world = manifest["world"]
    if isinstance(world, bool) or not isinstance(world, int) or not 1 <= world <= MAX_WORLD:
        raise BundleError(f"{root / WORLD_MANIFEST}: world: expected an int in 1..{MAX_WORLD}, got {describe(world)}")
    if not isinstance(manifest["family"], str):
        raise BundleError(f"{root / WORLD_MANIFEST}: family: expected a family name, got {describe(manifest['family'])}")
    recorded = WorldRecording(root, manifest)
    for rank in range(world):
        entry = check_entry(_read_yaml(root / rank_entry_name(rank)), str(root / rank_entry_name(rank)))
        record = RankRecord(rank, entry)
        if entry.get("bundle"):
            bundle_dir = root / bundle_name(entry, rank, root)
            record.bundle = load_bundle(bundle_dir)
            if record.bundle.family != manifest["family"] or record.bundle.world != world:
                raise BundleError(f"{bundle_dir}: records {record.bundle.family} at world "
                                  f"{record.bundle.world}, the world manifest says {manifest['family']} at {world}")
            if len(record.launches) != len(record.bundle.calls):
                raise BundleError(f"{root / rank_entry_name(rank)}: launches lists {len(record.launches)} calls, "
                                  f"the bundle holds {len(record.bundle.calls)}")
        recorded.ranks.append(record)
    return recorded


def describe_call(call: tuple[dict, dict]) -> dict[str, Any]:
    """A call as comparable fields: its params, and each input's dtype, shape and bits (a digest prefix)."""
    inputs, params = call
    out: dict[str, Any] = {f"param {k}": repr(v) for k, v in sorted(params.items())}
    for name, t in sorted(inputs.items()):
        out[f"input {name} shape"] = list(t.shape)
        out[f"input {name} dtype"] = str(t.dtype).removeprefix("torch.")
        out[f"input {name} bits"] = raw_sha256(t)[:12]
    return out


def _differences(mine: Mapping[str, Any], reference: Mapping[str, Any]) -> list[str]:
    """The fields where ``mine`` differs from ``reference`` (rows, steps, params and shapes first: they say the most)."""
    order = ("rows", "steps", "param", "shape", "dtype", "bits")
    keys = sorted(set(mine) | set(reference),
                  key=lambda k: (next(i for i, w in enumerate(order) if w in k.split()[:1] + k.split()[-1:]), k))
    return [k for k in keys if mine.get(k) != reference.get(k)]


def _majority(descriptions: dict[int, dict]) -> int:
    """The rank whose description the most ranks share (the lowest such rank; on a tie, the lowest rank)."""
    counts = Counter(repr(sorted(d.items())) for d in descriptions.values())
    best = max(counts.values())
    return min(r for r, d in descriptions.items() if counts[repr(sorted(d.items()))] == best)


def _relation(record: RankRecord, reference: RankRecord, launch: int, mine: dict) -> str:
    """How ``record``'s call ``launch`` relates to ``reference``'s neighbouring calls (skipped / passed again), or ''."""
    for offset, words in ((1, "skipped launch {launch}: its launch {launch} is rank {ref}'s launch {other}"),
                          (-1, "passed launch {other}'s call again at launch {launch} (rank {ref}'s launch {other})")):
        if reference.describe(launch + offset) == mine:
            return words.format(launch=launch, ref=reference.rank, other=launch + offset)
    return ""


def disagreements(world: WorldRecording) -> list[str]:
    """Lines naming each rank, launch and field where the recorded ranks' calls disagree (empty: they agree)."""
    found = _count_disagreements(world)
    with_calls = [r for r in world.ranks if r.bundle is not None]
    common = sorted(set.intersection(*(set(r.launches) for r in with_calls))) if with_calls else []
    for launch in common:
        descriptions = {r.rank: r.describe(launch) for r in with_calls}
        ref_rank = _majority(descriptions)
        reference = world.ranks[ref_rank]
        deviating = [r for r in with_calls if descriptions[r.rank] != descriptions[ref_rank]]
        for record in deviating:
            mine = descriptions[record.rank]
            differing = _differences(mine, descriptions[ref_rank])
            fields = "; ".join(f"{k}: rank {record.rank} {mine.get(k)}, rank {ref_rank} "
                               f"{descriptions[ref_rank].get(k)}" for k in differing[:SHOWN_FIELDS])
            fields += f" (and {len(differing) - SHOWN_FIELDS} more fields)" if len(differing) > SHOWN_FIELDS else ""
            relation = _relation(record, reference, launch, mine)
            found.append(f"rank {record.rank} deviates at launch {launch}: {fields}"
                         + (f"; rank {record.rank} {relation}" if relation else ""))
        if deviating:
            break  # after the first disagreement the ranks' calls are no longer paired
    return found


def _count_disagreements(world: WorldRecording) -> list[str]:
    """Lines naming the ranks whose number of calls differs from the majority's."""
    made = {r.rank: int(r.entry.get("calls_made", 0)) for r in world.ranks}
    usual = Counter(made.values()).most_common(1)[0][0] if len(set(made.values())) > 1 else None
    if usual is None:
        return []
    ref = min(r for r, n in made.items() if n == usual)
    return [f"rank {r} made {n} calls where rank {ref} made {usual} (launch {min(n, usual)} is the first that "
            f"not every rank made)" for r, n in sorted(made.items()) if n != usual]
