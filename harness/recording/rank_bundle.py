"""One rank's bundle in a recorded world: the objects it built and the calls it made, as data.

A directory of two files, the payload format of ``scenarios.bundle``
(safetensors, every tensor's dtype, shape, sha256 and view layout in the
manifest, the header checked before the parser sees it) under a manifest of
its own:

- ``manifest.yaml``: ``format`` (``FORMAT``), ``kind`` (``KIND``), ``rank``,
  ``world``, ``objects`` (in the order the rank built them; each ``name``,
  ``class``, ``kind`` ``public`` or ``system``, ``arguments``: the
  constructor arguments encoded by ``harness.recording.values``, a family
  system's ``family`` and ``config``), ``calls`` (in the order made; each
  ``index`` (the rank's call number since its recording began),
  ``object``, ``method``, ``arguments`` (encoded), ``state_before`` (the
  object's counters before the call), ``flight`` (``[first, end)`` flight
  recorder launches the call used, the end null while in flight; null for an
  object without a flight recorder), ``captured``, ``completed``,
  ``outputs`` (the names of its recorded outputs)), ``provenance`` and
  ``tensors`` (the entries of ``scenarios.bundle``).
- ``tensors.safetensors``: ``static.<object>.<path>`` (constructor
  tensors), ``call<i>.in.<path>`` (a call's tensor arguments, copied before
  it) and ``call<i>.out.<name>`` (its outputs: ``return...``, the tensor
  arguments it changed, ``state.<counter>``), ``i`` the call's position in
  the bundle.

``load_rank_bundle`` refuses (``BundleError`` naming the file and field)
any manifest field of the wrong kind, a tensor reference or output name with
no tensor, and any payload the ``scenarios.bundle`` checks refuse, before
anything is replayed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import yaml
from safetensors.torch import save_file

from golden.store import provenance as golden_provenance
from harness.recording.recorder import CallRecord, ObjectSpec
from harness.recording.values import tensor_refs
from scenarios.bundle import (MANIFEST, PAYLOAD, BundleError, load_checked_tensors, plain, read_yaml_mapping,
                              tensor_entry, with_layout)
from scenarios.fields import describe

FORMAT = 2
KIND = "rankcheck-rank-recording"
OBJECT_KINDS = ("public", "system")
MANIFEST_KEYS = ("format", "kind", "rank", "world", "objects", "calls", "provenance", "payload", "tensors")
CALL_TYPES = {"index": int, "object": str, "method": str, "arguments": dict, "state_before": dict,
              "captured": bool, "completed": bool, "outputs": list}


def save_rank_bundle(path: Path, *, rank: int, world: int, objects: Sequence[ObjectSpec],
                     calls: Sequence[CallRecord], source: str) -> Path:
    """Write one rank's bundle at ``path`` (a directory) and return it."""
    tensors: dict[str, torch.Tensor] = {}
    entries: dict[str, dict] = {}

    def add(key: str, t: torch.Tensor) -> None:
        """Store ``t`` under ``key`` with its manifest entry."""
        entries[key], tensors[key] = tensor_entry(t)

    manifest_objects = []
    for spec in objects:
        for subpath, t in spec.static.items():
            add(f"static.{spec.name}.{subpath}", t)
        entry = {"name": spec.name, "class": spec.class_name, "kind": spec.kind, "arguments": spec.arguments}
        if spec.kind == "system":
            entry.update(family=spec.family, config=spec.config)
        manifest_objects.append(entry)
    manifest_calls = []
    for position, call in enumerate(calls):
        for subpath, t in call.inputs.items():
            add(f"call{position}.in.{subpath}", t)
        for name, t in call.outputs.items():
            add(f"call{position}.out.{name}", t)
        manifest_calls.append({"index": call.index, "object": call.object, "method": call.method,
                               "arguments": call.arguments, "state_before": call.state_before,
                               "captured": call.captured, "completed": call.completed,
                               "flight": list(call.flight) if call.flight is not None else None,
                               "outputs": sorted(call.outputs)})
    prov = golden_provenance("cuda" if any(t.device.type == "cuda" for t in tensors.values()) else "cpu")
    prov.update(producer="recorder", source=source)
    manifest = {"format": FORMAT, "kind": KIND, "rank": rank, "world": world, "objects": manifest_objects,
                "calls": manifest_calls, "provenance": prov, "payload": PAYLOAD, "tensors": entries}
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / PAYLOAD), metadata={"format": KIND})
    (path / MANIFEST).write_text(yaml.safe_dump(plain(manifest), sort_keys=False, default_flow_style=None),
                                 encoding="utf-8")
    return path


@dataclass
class RankBundle:
    """One rank's loaded bundle: its manifest and checked tensors."""

    path: Path
    manifest: dict
    tensors: Mapping[str, torch.Tensor] = field(repr=False)

    @property
    def objects(self) -> list[dict]:
        """The objects in construction order (manifest entries)."""
        return list(self.manifest["objects"])

    @property
    def calls(self) -> list[dict]:
        """The recorded calls in order (manifest entries)."""
        return list(self.manifest["calls"])

    def _tensor(self, key: str) -> torch.Tensor:
        """A fresh copy of tensor ``key`` in its recorded layout."""
        return with_layout(self.tensors[key].clone(), self.manifest["tensors"][key].get("layout"))

    def _prefixed(self, prefix: str) -> dict[str, torch.Tensor]:
        """The tensors whose key starts with ``prefix``, by the rest of the key."""
        return {k[len(prefix):]: self._tensor(k) for k in self.tensors if k.startswith(prefix)}

    def static(self, name: str) -> dict[str, torch.Tensor]:
        """Object ``name``'s constructor tensors by path."""
        return self._prefixed(f"static.{name}.")

    def inputs(self, position: int) -> dict[str, torch.Tensor]:
        """Call ``position``'s tensor arguments (copied before it) by path."""
        return self._prefixed(f"call{position}.in.")

    def outputs(self, position: int) -> dict[str, torch.Tensor]:
        """Call ``position``'s recorded outputs by name (empty for a call that did not return)."""
        return self._prefixed(f"call{position}.out.")

    def digests(self, position: int) -> dict[str, str]:
        """The sha256 of call ``position``'s tensor arguments by path."""
        prefix = f"call{position}.in."
        return {k[len(prefix):]: e["sha256"] for k, e in self.manifest["tensors"].items() if k.startswith(prefix)}


KIND_WORDS = {dict: "mapping", list: "list", int: "whole number", str: "string", bool: "true or false"}


def _require(value: Any, kind: type, shown: str) -> Any:
    """``value`` when it is a ``kind`` (an int is never a bool), else a ``BundleError`` naming ``shown``."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BundleError(f"{shown}: expected a {KIND_WORDS[kind]}, got {describe(value)}")
    return value


def _check_object(entry: Any, shown: str, keys: set[str]) -> str:
    """One object entry's fields; return its name."""
    _require(entry, dict, shown)
    name = _require(entry.get("name"), str, f"{shown}.name")
    _require(entry.get("class"), str, f"{shown}.class")
    if entry.get("kind") not in OBJECT_KINDS:
        raise BundleError(f"{shown}.kind: expected one of {list(OBJECT_KINDS)}, got {describe(entry.get('kind'))}")
    _require(entry.get("arguments"), dict, f"{shown}.arguments")
    if entry["kind"] == "system":
        _require(entry.get("family"), str, f"{shown}.family")
        _require(entry.get("config"), dict, f"{shown}.config")
    missing = [r["$tensor"] for r in tensor_refs({"$dict": entry["arguments"]})
               if f"static.{name}.{r['$tensor']}" not in keys]
    if missing:
        raise BundleError(f"{shown}.arguments: tensors {missing[:4]} are not in the payload")
    return name


def _check_call(call: Any, position: int, shown: str, objects: set[str], keys: set[str]) -> None:
    """One call entry's fields, its object, and its tensors in the payload."""
    where = f"{shown}: calls[{position}]"
    _require(call, dict, where)
    for key, kind in CALL_TYPES.items():
        _require(call.get(key), kind, f"{where}.{key}")
    if call["object"] not in objects:
        raise BundleError(f"{where}.object: expected one of {sorted(objects)}, got {describe(call['object'])}")
    flight = call.get("flight")
    if flight is not None and not (isinstance(flight, list) and len(flight) == 2
                                   and all(v is None or isinstance(v, int) for v in flight)):
        raise BundleError(f"{where}.flight: expected null or [first, end] launches, got {describe(flight)}")
    wanted = [] if call["captured"] else [f"call{position}.in.{r['$tensor']}"
                                          for r in tensor_refs({"$dict": call["arguments"]})]
    wanted += [f"call{position}.out.{name}" for name in call["outputs"]]
    missing = [k for k in wanted if k not in keys]
    if missing:
        raise BundleError(f"{where}: tensors {missing[:4]} are not in the payload")


def load_rank_bundle(path: str | Path) -> RankBundle:
    """Read, check and return the rank bundle at ``path``."""
    path = Path(path)
    shown = f"{path}/{MANIFEST}"
    manifest = read_yaml_mapping(path / MANIFEST, shown)
    unknown = [k for k in manifest if k not in MANIFEST_KEYS]
    missing = [k for k in MANIFEST_KEYS if k not in manifest]
    if unknown or missing:
        raise BundleError(f"{shown}: unknown keys {unknown}, missing keys {missing}")
    if manifest["format"] != FORMAT or manifest["kind"] != KIND or manifest["payload"] != PAYLOAD:
        raise BundleError(f"{shown}: expected format {FORMAT}, kind {KIND}, payload {PAYLOAD}; got "
                          f"{describe(manifest['format'])}, {describe(manifest['kind'])}, {describe(manifest['payload'])}")
    for key, kind in (("rank", int), ("world", int), ("objects", list), ("calls", list), ("provenance", dict),
                      ("tensors", dict)):
        _require(manifest[key], kind, f"{shown}: {key}")
    tensors = load_checked_tensors(path, str(path), manifest["tensors"])
    keys = set(tensors)
    names = {_check_object(o, f"{shown}: objects[{i}]", keys) for i, o in enumerate(manifest["objects"])}
    if len(names) != len(manifest["objects"]):
        raise BundleError(f"{shown}: objects: names must be unique")
    for position, call in enumerate(manifest["calls"]):
        _check_call(call, position, shown, names, keys)
    return RankBundle(path, manifest, tensors)


__all__ = ["FORMAT", "RankBundle", "load_rank_bundle", "save_rank_bundle"]
