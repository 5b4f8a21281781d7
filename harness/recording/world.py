"""Reading a recorded world (``harness.recording.writer``'s layout) and finding where its ranks' calls diverge.

``load_world(directory)`` reads ``world.yaml`` and every rank's entry and
bundle (``harness.recording.rank_bundle``: safetensors only, every tensor
checked against its sha256); anything missing, malformed or tampered with is
a ``BundleError`` naming the file, before anything runs: every YAML file is
read through ``scenarios.data_files`` (capped, regular files only, no alias
bombs or duplicate keys), an entry's fields are type-checked, its ``calls``
must be strictly increasing and be the bundle's, and every rank's objects
must be the world manifest's. A world recorded in format 1 (before objects
were recorded: family systems only) is refused with what to do: record it
again. An entry whose recording is still ``running`` is a rank that was
killed or crashed, and ``RankRecord.ended`` says so with the last call it
wrote.

``divergences(world)`` compares the ranks' recorded calls without running
anything, the way ``harness.rank.agreement`` compares them live: calls are
lined up by the rank's call number (every rank makes the same calls on the
same objects in the same order), and each call is described by its object,
method and arguments (``harness.recording.targets``: plain arguments by
value except those that differ by rank, tensors by shape and dtype, and by
bits where every rank passes the same ones; a family system's call by rows,
steps, params and every input's bits, as every rank passes the same full
tensors). At the first call where descriptions differ, the rank(s) whose
call is not the majority's (on a tie, not the lowest rank's) are named
with every field that differs and, when the deviating call is the reference
rank's previous or next call, as a rank that passed a call again or skipped
one. Ranks that made fewer calls, and ranks whose last call never returned
(in flight when the recording ended), are named too. Each ``Divergence``
names the rank, the call number, the object and method, and the flight
recorder's launch (``flight_launches`` at the call), so the offline
finding can be set beside the live one (``kernels.flight.first_divergence``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from golden.families import FAMILIES, facts
from harness.recording.rank_bundle import RankBundle, load_rank_bundle
from harness.recording.targets import method_facts
from harness.recording.values import decode_plain, describe_value, tensor_refs
from harness.recording.writer import RUNNING, WORLD_FORMAT, WORLD_MANIFEST, rank_dir_name, rank_entry_name
from scenarios.bundle import BundleError, read_yaml_mapping
from scenarios.fields import describe

SHOWN_FIELDS = 4
MAX_WORLD = 72  # the largest world a scenario may name (scenarios.schema)
WORLD_KEYS = ("format", "world", "objects", "versions", "start")
FIELD_ORDER = ("object", "method", "captured", "rows", "steps", "param", "argument", "input", "shape", "dtype", "bits")


def first_line(text: object) -> str:
    """The first non-empty line of ``text`` (an exception names itself there; CUDA's errors append advice)."""
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


@dataclass
class RankRecord:
    """One rank's entry and bundle (None when the rank made no call)."""

    rank: int
    entry: dict
    bundle: RankBundle | None = None

    @property
    def calls(self) -> list[int]:
        """The rank's call number of each call in the bundle."""
        return list(self.entry.get("calls") or [])

    def position(self, index: int) -> int | None:
        """Where call ``index`` sits in the bundle, or None when it is not there."""
        calls = self.calls
        return calls.index(index) if index in calls else None

    def call(self, index: int) -> dict | None:
        """The manifest entry of call ``index``, or None."""
        position = self.position(index)
        return None if position is None else self.bundle.calls[position]

    def spec(self, name: str) -> dict:
        """The construction entry of object ``name``."""
        return next(o for o in self.bundle.objects if o["name"] == name)

    def describe(self, index: int) -> dict[str, Any] | None:
        """Call ``index`` as comparable fields (module docstring), or None when it is not in the bundle."""
        call = self.call(index)
        if call is None:
            return None
        spec = self.spec(call["object"])
        out: dict[str, Any] = {"object": call["object"], "method": call["method"]}
        if call["captured"]:
            out["captured"] = True
        digests = self.bundle.digests(self.position(index))
        if spec["kind"] == "system":
            out.update(describe_system_call(spec["family"], call["arguments"], digests))
            return out
        known = method_facts(spec["class"], call["method"])
        for name, value in sorted(call["arguments"].items()):
            if name not in known.per_rank:
                describe_value(name, value, digests, name in known.agreed, out)
        return out

    def made(self, index: int) -> str:
        """``(<object>.<method>, flight launch <k>)`` for call ``index`` (empty when it is not kept)."""
        call = self.call(index)
        return "" if call is None else f"({call['object']}.{call['method']}{flight_text(call.get('flight'))})"

    def where(self, index: int) -> str:
        """``call <n> (<object>.<method>, flight launch <k>)`` for call ``index`` (its number alone when not kept)."""
        return f"call {index} {self.made(index)}".rstrip()

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
        return f"killed or crashed: last write at call {last.get('call')} ({what}); no orderly exit was recorded"

    def completed(self, index: int) -> bool:
        """Whether this rank's call ``index`` returned (the last one may have been in flight)."""
        call = self.call(index)
        return call is not None and bool(call["completed"])


def flight_text(flight: Any) -> str:
    """``, flight launch 4`` (or ``launches 4..6``) from a call's ``[first, end)`` flight range; empty without one."""
    if not isinstance(flight, list) or flight[0] is None:
        return ""
    first, end = flight
    if end is None or end - first <= 1:
        return f", flight launch {first}"
    return f", flight launches {first}..{end - 1}"


def describe_system_call(family: str, arguments: Mapping[str, Any], digests: Mapping[str, str]) -> dict[str, Any]:
    """A family system's ``launch`` call as fields: rows and steps, its params, each input's shape, dtype and bits."""
    inputs = list(tensor_refs(arguments.get("call_inputs")))
    out: dict[str, Any] = {}
    if family in FAMILIES:
        shaped = next((r for r in inputs if r["$tensor"] == f"call_inputs.{facts(family).shape_input}"), None)
        if shaped is not None:
            out["rows"] = shaped["shape"][0]
            if facts(family).stepped:
                out["steps"] = shaped["shape"][1]
    params = decode_plain(arguments.get("call_params")) or {}
    out.update({f"param {k}": repr(v) for k, v in sorted(params.items())})
    for ref in inputs:
        name = ref["$tensor"].removeprefix("call_inputs.")
        out[f"input {name} shape"] = list(ref["shape"])
        out[f"input {name} dtype"] = ref["dtype"]
        if ref["$tensor"] in digests:
            out[f"input {name} bits"] = digests[ref["$tensor"]][:12]
    return out


@dataclass
class WorldRecording:
    """A recorded world: its manifest and every rank's record."""

    directory: Path
    manifest: dict
    ranks: list[RankRecord] = field(default_factory=list)

    @property
    def world(self) -> int:
        """The recorded world size."""
        return int(self.manifest["world"])

    @property
    def objects(self) -> list[dict]:
        """The recorded objects (``name``, ``class``, ``kind``, a system's ``family``)."""
        return list(self.manifest["objects"])

    @property
    def family(self) -> str:
        """What was recorded, in words: ``sampler=ShardedMarkovSampler, ...`` (a family system by its family)."""
        return ", ".join(o.get("family") or f"{o['name']}={o['class']}" for o in self.objects)


def check_entry(entry: dict, shown: str) -> dict:
    """A rank's entry with typed fields: ``bundle`` a name or empty, ``calls`` strictly increasing, ``calls_made`` an int."""
    if entry.get("bundle") is not None and not isinstance(entry["bundle"], str):
        raise BundleError(f"{shown}: bundle: expected a bundle name, got {describe(entry['bundle'])}")
    calls = entry.get("calls") or []
    if not isinstance(calls, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                              for i in calls):
        raise BundleError(f"{shown}: calls: expected a list of call numbers (ints >= 0), got {describe(calls)}")
    repeated = next((b for a, b in zip(calls, calls[1:]) if b <= a), None)
    if repeated is not None:
        raise BundleError(f"{shown}: calls: expected strictly increasing call numbers, got {repeated} after a "
                          f"call >= {repeated} in {describe(calls)}")
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


def check_world_manifest(root: Path) -> dict:
    """The world manifest at ``root``, its format, world and objects checked."""
    shown = root / WORLD_MANIFEST
    manifest = read_yaml_mapping(shown, str(shown))
    if manifest.get("format") == 1:
        raise BundleError(f"{shown}: format 1, written by an older rankcheck (family systems only, no objects); "
                          f"this version replays format {WORLD_FORMAT}: record the job again (rankcheck.recording, or "
                          f"`python -m harness record capture` for a scenario)")
    missing = [k for k in WORLD_KEYS if k not in manifest]
    if missing:
        raise BundleError(f"{shown}: required keys missing: {missing}")
    if manifest["format"] != WORLD_FORMAT:
        raise BundleError(f"{shown}: format: expected {WORLD_FORMAT}, got {describe(manifest['format'])}")
    world = manifest["world"]
    if isinstance(world, bool) or not isinstance(world, int) or not 1 <= world <= MAX_WORLD:
        raise BundleError(f"{shown}: world: expected an int in 1..{MAX_WORLD}, got {describe(world)}")
    objects = manifest["objects"]
    if not isinstance(objects, list) or not objects or not all(
            isinstance(o, dict) and isinstance(o.get("name"), str) and isinstance(o.get("class"), str)
            for o in objects):
        raise BundleError(f"{shown}: objects: expected a non-empty list of {{name, class, kind}}, got {describe(objects)}")
    return manifest


def load_rank(root: Path, manifest: dict, rank: int) -> RankRecord:
    """Rank ``rank``'s entry and bundle, checked against each other and the world manifest."""
    shown = root / rank_entry_name(rank)
    record = RankRecord(rank, check_entry(read_yaml_mapping(shown, str(shown)), str(shown)))
    if not record.entry.get("bundle"):
        return record
    bundle_dir = root / bundle_name(record.entry, rank, root)
    record.bundle = bundle = load_rank_bundle(bundle_dir)
    if bundle.manifest["rank"] != rank or bundle.manifest["world"] != manifest["world"]:
        raise BundleError(f"{bundle_dir}: records rank {bundle.manifest['rank']} of {bundle.manifest['world']}, "
                          f"the world manifest and entry say rank {rank} of {manifest['world']}")
    if [c["index"] for c in bundle.calls] != record.calls:
        raise BundleError(f"{shown}: calls {record.calls} are not the bundle's "
                          f"{[c['index'] for c in bundle.calls]}")
    expected = [(o["name"], o["class"]) for o in manifest["objects"]]
    if [(o["name"], o["class"]) for o in bundle.objects] != expected:
        raise BundleError(f"{bundle_dir}: objects {[(o['name'], o['class']) for o in bundle.objects]} are not the "
                          f"world manifest's {expected}")
    return record


def load_world(directory: str | Path) -> WorldRecording:
    """Read and check the world recording at ``directory``."""
    root = Path(directory)
    manifest = check_world_manifest(root)
    recorded = WorldRecording(root, manifest)
    recorded.ranks = [load_rank(root, manifest, rank) for rank in range(manifest["world"])]
    return recorded


@dataclass(frozen=True)
class Divergence:
    """The first place the recorded ranks part: the rank, its call number, object, method, flight launch and what."""

    rank: int
    call: int
    object: str | None
    method: str | None
    launch: int | None
    what: str

    def describe(self) -> str:
        """The finding's sentence."""
        return f"rank {self.rank} {self.what}"

    def as_dict(self) -> dict:
        """The finding as plain data (the replay report's ``first``)."""
        return {"rank": self.rank, "call": self.call, "object": self.object, "method": self.method,
                "launch": self.launch, "what": self.describe()}


def _divergence(record: RankRecord, index: int, what: str, source: RankRecord | None = None) -> Divergence:
    """A ``Divergence`` of ``record``'s call ``index`` (object, method and flight launch from ``source``'s bundle, default its own)."""
    call = (source or record).call(index) or {}
    flight = call.get("flight")
    launch = flight[0] if isinstance(flight, list) else None
    return Divergence(record.rank, index, call.get("object"), call.get("method"), launch, what)


def _field_rank(key: str) -> int:
    """Where a field sorts among the differences: object and method first, bits last."""
    words = key.split()
    word = words[-1] if words[-1] in ("shape", "dtype", "bits") else words[0]
    return FIELD_ORDER.index(word) if word in FIELD_ORDER else len(FIELD_ORDER)


def _differences(mine: Mapping[str, Any], reference: Mapping[str, Any]) -> list[str]:
    """The fields where ``mine`` differs from ``reference``, the most telling first."""
    keys = sorted(set(mine) | set(reference), key=lambda k: (_field_rank(k), k))
    return [k for k in keys if mine.get(k) != reference.get(k)]


def _majority(descriptions: dict[int, dict]) -> int:
    """The rank whose description the most ranks share (the lowest such rank; on a tie, the lowest rank)."""
    counts = Counter(repr(sorted(d.items())) for d in descriptions.values())
    best = max(counts.values())
    return min(r for r, d in descriptions.items() if counts[repr(sorted(d.items()))] == best)


def _relation(record: RankRecord, reference: RankRecord, index: int, mine: dict) -> str:
    """How ``record``'s call ``index`` relates to ``reference``'s neighbouring calls (skipped / passed again), or ''."""
    for offset, words in ((1, "skipped call {index}: its call {index} is rank {ref}'s {other}"),
                          (-1, "passed call {n}'s arguments again at call {index} (rank {ref}'s {other})")):
        if reference.describe(index + offset) == mine:
            return words.format(index=index, ref=reference.rank, other=reference.where(index + offset),
                                n=index + offset)
    return ""


def _field_text(record: RankRecord, ref_rank: int, mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> str:
    """The fields where ``record``'s call differs from rank ``ref_rank``'s (the first ``SHOWN_FIELDS``)."""
    differing = _differences(mine, theirs)
    shown = "; ".join(f"{k}: rank {record.rank} {mine.get(k, 'absent')}, rank {ref_rank} {theirs.get(k, 'absent')}"
                      for k in differing[:SHOWN_FIELDS])
    return shown + (f" (and {len(differing) - SHOWN_FIELDS} more fields)" if len(differing) > SHOWN_FIELDS else "")


def _deviation(record: RankRecord, reference: RankRecord, index: int, mine: dict, theirs: dict) -> Divergence:
    """How ``record``'s call ``index`` deviates from ``reference``'s.

    Another object or method: the rank did not make the reference's call
    (the finding names that call's object and launch); the same method with
    other arguments: the fields that differ (named by the rank's own call).
    A skipped or repeated call is said when the neighbouring calls show it.
    """
    relation = _relation(record, reference, index, mine)
    other_call = (mine["object"], mine["method"]) != (theirs["object"], theirs["method"])
    if other_call:  # the call the rank did not make first: it is what the finding names
        what = (f"deviates at call {index}: rank {reference.rank} made {reference.made(index)}, "
                f"rank {record.rank} {record.made(index)}")
    else:
        what = f"deviates at {record.where(index)}: {_field_text(record, reference.rank, mine, theirs)}"
    # a call the rank did not make is named by that call: the reference rank's object and launch
    source = reference if other_call or relation.startswith("skipped") else record
    return _divergence(record, index, what + (f"; rank {record.rank} {relation}" if relation else ""), source)


def _content_divergences(world: WorldRecording) -> list[Divergence]:
    """The ranks whose call differs from the majority's at the first call where the ranks' calls differ."""
    with_calls = [r for r in world.ranks if r.bundle is not None]
    common = sorted(set.intersection(*(set(r.calls) for r in with_calls))) if with_calls else []
    for index in common:
        descriptions = {r.rank: r.describe(index) for r in with_calls}
        ref_rank = _majority(descriptions)
        found = [_deviation(record, world.ranks[ref_rank], index, descriptions[record.rank], descriptions[ref_rank])
                 for record in with_calls if descriptions[record.rank] != descriptions[ref_rank]]
        if found:
            return found  # after the first divergence the ranks' calls are no longer paired
    return []


def _stopped(world: WorldRecording) -> list[Divergence]:
    """Ranks that made fewer calls than the most any rank made, then ranks whose last call never returned.

    The ranks that stopped early come first: a peer left waiting in its
    next call (in flight) is the consequence, the rank that stopped the cause.
    """
    made = {r.rank: int(r.entry.get("calls_made", 0)) for r in world.ranks}
    most = max(made.values(), default=0)
    ahead = next((r for r in world.ranks if made[r.rank] == most), None)
    found = [_divergence(record, made[record.rank], f"made {made[record.rank]} calls where rank {ahead.rank} made "
                         f"{most}: it stopped before rank {ahead.rank}'s {ahead.where(made[record.rank])}", ahead)
             for record in world.ranks if made[record.rank] < most]
    for record in world.ranks:
        if record.entry.get("in_flight") and record.calls:
            index = record.calls[-1]
            found.append(_divergence(record, index, f"stopped in {record.where(index)}: the call never returned "
                                     f"(recording ended: {record.ended})"))
    return found


def divergences(world: WorldRecording) -> list[Divergence]:
    """Where the recorded ranks part: the first call whose ranks' calls differ, then ranks that stopped early."""
    return _content_divergences(world) + _stopped(world)


def disagreements(world: WorldRecording) -> list[str]:
    """``divergences`` as sentences (empty: the ranks agree and none stopped early)."""
    return [d.describe() for d in divergences(world)]
