"""Recorded bundles: live calls captured as data and replayed exactly.

A bundle is a directory of two files:

- ``manifest.yaml`` (read with ``yaml.safe_load``): ``format``, ``name``,
  ``family``, ``world``, ``config`` (the family's, minus tp/world),
  ``calls`` (each ``rows``, ``steps``, ``params``, and the names of its
  inputs and recorded outputs), ``state`` (the counters at the start of the
  recording, e.g. ``launches`` or ``generation_ll``), ``provenance`` (who
  recorded it, torch, device, git revision, date, source) and ``tensors``:
  for every tensor its ``dtype``, ``shape``, ``sha256`` of its raw bytes and,
  for a strided or offset view, its ``layout`` (``stride``, ``offset`` in
  elements) so that replay rebuilds the same view.
- ``tensors.safetensors``: every tensor, contiguous, under the names
  ``static.<name>``, ``call<i>.<name>`` and ``call<i>.out.<name>``.

Loading reads the manifest through ``scenarios.data_files`` (a regular file
of at most ``MAX_MANIFEST_BYTES``, safe YAML) and checks the type of every
field (a string where a mapping belongs is refused by name); it checks the
safetensors header before handing the file to the safetensors parser (a
pickle or any other payload is refused: a bundle is data and can never run
code): every tensor's dtype is known, its offsets lie inside the data and
span exactly its shape's bytes, its dtype and shape are the manifest's, and
a recorded ``layout`` reaches at most ``MAX_LAYOUT_SPREAD`` times the
tensor's elements (a stride of 10^12 would ask for terabytes); then it
checks every tensor's sha256. Any difference is a ``BundleError`` naming the
bundle and the tensor, before anything is allocated for a replay. ``load_bundle`` returns a ``RecordedScenario``, a
``Scenario`` whose ``build_static``/``build_call`` (``scenarios.builders``)
return the recorded tensors, at the recorded world only.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import yaml
from safetensors.torch import load_file, save_file

from golden.families import FAMILIES, facts
from golden.store import provenance as golden_provenance
from golden.store import raw_sha256
from scenarios.data_files import MAX_MANIFEST_BYTES, read_yaml, require_regular
from scenarios.fields import describe
from scenarios.schema import Scenario, ScenarioError, validate

FORMAT = 1
MANIFEST = "manifest.yaml"
PAYLOAD = "tensors.safetensors"
MAX_HEADER = 100 * 1024 * 1024


class BundleError(ScenarioError):
    """A bundle that is malformed, tampered with, or not safetensors."""


def _dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``bfloat16``."""
    return str(dtype).removeprefix("torch.")


def _call_shape(family: str, inputs: Mapping[str, torch.Tensor]) -> tuple[int, int | None]:
    """Rows and steps of a call, read off its inputs."""
    fam = facts(family)
    shape = inputs[fam.shape_input].shape
    return (int(shape[0]), int(shape[1])) if fam.stepped else (int(shape[0]), None)


def _plain(value: Any) -> Any:
    """``value`` as plain YAML data (dict, list, str, int, float, bool, None), else TypeError."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return str(value)
    raise TypeError(f"cannot store {type(value).__name__} {value!r} in a bundle manifest")


def _layout(t: torch.Tensor) -> dict | None:
    """``{stride, offset}`` of a view that is not a plain contiguous tensor, else None."""
    if t.is_contiguous() and t.storage_offset() == 0:
        return None
    return {"stride": list(t.stride()), "offset": int(t.storage_offset())}


def _with_layout(t: torch.Tensor, layout: Mapping | None) -> torch.Tensor:
    """``t`` rebuilt as a view with ``layout``'s strides and offset (padding holds NaN or -1)."""
    if layout is None:
        return t
    stride, offset = list(layout["stride"]), int(layout["offset"])
    extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, stride)) if t.numel() else 0
    storage = torch.empty(offset + extent, dtype=t.dtype)
    storage.fill_(float("nan") if t.dtype.is_floating_point else -1)
    view = torch.as_strided(storage, tuple(t.shape), tuple(stride), offset)
    view.copy_(t)
    return view


def tensor_entry(t: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """A tensor's manifest entry (dtype, shape, sha256 of its raw bytes, layout of a view) and its contiguous host copy."""
    t = t.detach().cpu()
    entry = {"dtype": _dtype_name(t.dtype), "shape": list(t.shape), "sha256": raw_sha256(t)}
    layout = _layout(t)
    if layout is not None:
        entry["layout"] = layout
    return entry, t.contiguous()


def save_bundle(path: str | Path, *, family: str, config: Mapping[str, Any], world: int,
                static: Mapping[str, torch.Tensor],
                calls: Sequence[tuple[Mapping[str, torch.Tensor], Mapping[str, Any]]],
                outputs: Sequence[Mapping[str, torch.Tensor]] | None = None,
                state: Mapping[str, int] | None = None, name: str = "recorded",
                device: str = "cpu", source: str = "") -> Path:
    """Write a bundle directory at ``path`` and return it.

    ``calls``: ``(call_inputs, call_params)`` per call, in order;
    ``outputs``: the outputs each call produced (optional, one mapping per
    call); ``state``: the family's counters before the first call.
    """
    path = Path(path)
    if outputs is not None and len(outputs) != len(calls):
        raise ValueError(f"outputs: expected one mapping per call ({len(calls)}), got {len(outputs)}")
    tensors: dict[str, torch.Tensor] = {}
    entries: dict[str, dict] = {}

    def add(key: str, t: torch.Tensor) -> None:
        """Record tensor ``t`` under ``key`` with its digest and layout."""
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{key}: expected a tensor, got {type(t).__name__}")
        entries[key], tensors[key] = tensor_entry(t)

    for k, t in static.items():
        add(f"static.{k}", t)
    manifest_calls = []
    for i, (inputs, params) in enumerate(calls):
        rows, steps = _call_shape(family, inputs)
        for k, t in inputs.items():
            add(f"call{i}.{k}", t)
        outs = outputs[i] if outputs is not None else {}
        for k, t in outs.items():
            add(f"call{i}.out.{k}", t)
        call = {"rows": rows, "params": dict(params), "inputs": sorted(inputs), "outputs": sorted(outs)}
        if steps is not None:
            call["steps"] = steps
        manifest_calls.append(call)
    prov = golden_provenance(device)
    prov["producer"] = "recorder"
    prov["source"] = source
    manifest = {"format": FORMAT, "name": name, "family": family, "world": int(world),
                "config": dict(config), "calls": manifest_calls, "state": dict(state or {}),
                "provenance": prov, "payload": PAYLOAD, "tensors": entries}
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / PAYLOAD), metadata={"format": "rankcheck-bundle-1"})
    text = yaml.safe_dump(_plain(manifest), sort_keys=False, default_flow_style=None)
    (path / MANIFEST).write_text(text, encoding="utf-8")
    return path


def _check_safetensors_header(file: Path, shown: str) -> dict:
    """The safetensors JSON header of ``file``, each tensor's entry checked against the file; anything else is a ``BundleError``."""
    total = require_regular(file, f"{shown}: {PAYLOAD}", BundleError)
    try:
        with open(file, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise BundleError(f"{shown}: {PAYLOAD}: not a safetensors file (too short)")
            (size,) = struct.unpack("<Q", head)
            if size == 0 or size > MAX_HEADER or 8 + size > total:
                raise BundleError(f"{shown}: {PAYLOAD}: not a safetensors file (header length {size} in a file of "
                                  f"{total} bytes)")
            header = f.read(size)
    except OSError as exc:
        raise BundleError(f"{shown}: {PAYLOAD}: cannot read: {exc.strerror or exc}") from exc
    if not header.startswith(b"{"):
        raise BundleError(f"{shown}: {PAYLOAD}: not a safetensors file (no JSON header; "
                          f"pickles and other payloads are refused)")
    try:
        parsed = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BundleError(f"{shown}: {PAYLOAD}: not a safetensors file (bad header: {str(exc)[:200]})") from exc
    if not isinstance(parsed, dict):
        raise BundleError(f"{shown}: {PAYLOAD}: not a safetensors file (header is not an object)")
    data_bytes = total - 8 - size
    for name, entry in parsed.items():
        if name != "__metadata__":
            _check_payload_entry(f"{shown}: {PAYLOAD}: {name}", entry, data_bytes)
    return parsed


# safetensors' dtype names, with torch's name and the bytes of one element
SAFETENSORS_DTYPES = {
    "BOOL": ("bool", 1), "U8": ("uint8", 1), "I8": ("int8", 1), "F8_E4M3": ("float8_e4m3fn", 1),
    "F8_E5M2": ("float8_e5m2", 1), "I16": ("int16", 2), "U16": ("uint16", 2), "F16": ("float16", 2),
    "BF16": ("bfloat16", 2), "I32": ("int32", 4), "U32": ("uint32", 4), "F32": ("float32", 4),
    "I64": ("int64", 8), "U64": ("uint64", 8), "F64": ("float64", 8),
}


def _int_list(value: Any, length: int | None = None) -> bool:
    """Whether ``value`` is a list of non-negative ints (of ``length`` items when given)."""
    return (isinstance(value, list) and (length is None or len(value) == length)
            and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value))


def _check_payload_entry(shown: str, entry: Any, data_bytes: int) -> None:
    """One tensor's header entry: a known dtype, a shape, and offsets inside the data that hold exactly its bytes."""
    if not isinstance(entry, dict):
        raise BundleError(f"{shown}: expected a mapping of dtype, shape, data_offsets, got {describe(entry)}")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in SAFETENSORS_DTYPES:
        raise BundleError(f"{shown}: dtype: expected one of {', '.join(SAFETENSORS_DTYPES)}, got {describe(dtype)}")
    if not _int_list(shape):
        raise BundleError(f"{shown}: shape: expected a list of ints >= 0, got {describe(shape)}")
    if not _int_list(offsets, 2) or not offsets[0] <= offsets[1] <= data_bytes:
        raise BundleError(f"{shown}: data_offsets: expected [begin, end] within the {data_bytes} data bytes, "
                          f"got {describe(offsets)}")
    need = math.prod(shape) * SAFETENSORS_DTYPES[dtype][1]
    if offsets[1] - offsets[0] != need:
        raise BundleError(f"{shown}: data_offsets: {dtype} {shape} takes {need} bytes, the offsets give "
                          f"{offsets[1] - offsets[0]}")


# A recorded view's storage (offset plus the span its strides reach) is at most this many times its elements.
MAX_LAYOUT_SPREAD = 64
LAYOUT_SLACK = 4096


def _check_manifest_entry(shown: str, entry: Any, stored: Mapping[str, Any]) -> None:
    """One tensor's manifest entry: typed fields, the payload's dtype and shape, and a layout its storage bounds."""
    if not isinstance(entry, dict):
        raise BundleError(f"{shown}: expected a mapping of dtype, shape, sha256, got {describe(entry)}")
    for key in entry:
        if key not in ("dtype", "shape", "sha256", "layout"):
            raise BundleError(f"{shown}.{key}: unknown key")
    dtype, shape = entry.get("dtype"), entry.get("shape")
    if not isinstance(entry.get("sha256"), str):
        raise BundleError(f"{shown}.sha256: expected a string, got {describe(entry.get('sha256'))}")
    if not isinstance(dtype, str) or not _int_list(shape):
        raise BundleError(f"{shown}: expected a dtype string and a shape list of ints, got {describe(dtype)} "
                          f"{describe(shape)}")
    payload = SAFETENSORS_DTYPES[stored["dtype"]][0], stored["shape"]
    if (dtype, shape) != payload:
        raise BundleError(f"{shown}: payload has {payload[0]} {payload[1]}, manifest says {dtype} {shape}")
    layout = entry.get("layout")
    if layout is None:
        return
    if not isinstance(layout, dict) or set(layout) != {"stride", "offset"}:
        raise BundleError(f"{shown}.layout: expected a mapping of stride and offset, got {describe(layout)}")
    stride, offset = layout["stride"], layout["offset"]
    if not _int_list(stride, len(shape)) or not _int_list([offset]):
        raise BundleError(f"{shown}.layout: expected {len(shape)} strides and an offset, ints >= 0, got "
                          f"{describe(stride)} {describe(offset)}")
    numel = math.prod(shape)
    storage = offset + (1 + sum((n - 1) * st for n, st in zip(shape, stride)) if numel else 0)
    limit = MAX_LAYOUT_SPREAD * numel + LAYOUT_SLACK
    if storage > limit:
        raise BundleError(f"{shown}.layout: strides {stride} and offset {offset} reach {storage} elements, more than "
                          f"the {limit} allowed for {numel} elements ({MAX_LAYOUT_SPREAD} x elements + {LAYOUT_SLACK})")


@dataclass(frozen=True)
class RecordedScenario(Scenario):
    """A scenario replayed from a bundle's recorded tensors."""

    world: int = 1
    state: Mapping[str, int] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    tensors: Mapping[str, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)
    layouts: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __hash__(self) -> int:
        """Hash by name and bundle path (the tensors are not hashable)."""
        return hash((self.full_name, self.source))

    def _tensor(self, key: str) -> torch.Tensor:
        """A fresh copy of recorded tensor ``key`` in its recorded layout."""
        return _with_layout(self.tensors[key].clone(), self.layouts.get(key))

    def recorded_static(self) -> dict[str, torch.Tensor]:
        """The recorded static tensors."""
        return {k.split(".", 1)[1]: self._tensor(k) for k in self.tensors if k.startswith("static.")}

    def recorded_call(self, call_index: int, world: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The recorded inputs and params of call ``call_index`` (only at the recorded world)."""
        if world != self.world:
            raise ValueError(f"world: bundle {self.full_name} was recorded at world {self.world}, got {world}")
        if not 0 <= call_index < len(self.calls):
            raise IndexError(f"call_index: {self.full_name} has {len(self.calls)} calls, got {call_index}")
        prefix = f"call{call_index}."
        inputs = {k[len(prefix):]: self._tensor(k) for k in self.tensors
                  if k.startswith(prefix) and not k.startswith(prefix + "out.")}
        return inputs, dict(self.calls[call_index].params)

    def recorded_outputs(self, call_index: int) -> dict[str, torch.Tensor]:
        """The outputs recorded for call ``call_index`` (empty when none were)."""
        prefix = f"call{call_index}.out."
        return {k[len(prefix):]: self._tensor(k) for k in self.tensors if k.startswith(prefix)}

    def initial_state(self) -> dict[str, int]:
        """The counters at the start of the recording."""
        return dict(self.state)


_MANIFEST_KEYS = ("format", "name", "family", "world", "config", "calls", "state", "provenance", "payload",
                  "tensors")


def read_yaml_mapping(file: Path, shown: str) -> dict:
    """The YAML mapping in ``file`` (``scenarios.data_files``: a capped regular file, safe YAML); anything else is a ``BundleError`` starting with ``shown``."""
    data = read_yaml(file, shown, MAX_MANIFEST_BYTES, BundleError)
    if not isinstance(data, dict):
        raise BundleError(f"{shown}: expected a mapping, got {describe(data)}")
    return data


_MANIFEST_TYPES = {"name": str, "family": str, "world": int, "config": dict, "calls": list, "provenance": dict,
                   "tensors": dict}


def _read_manifest(path: Path, shown: str) -> dict:
    """The manifest of the bundle at ``path``, its keys and their types checked."""
    manifest = read_yaml_mapping(path / MANIFEST, f"{shown}: {MANIFEST}")
    for key in manifest:
        if key not in _MANIFEST_KEYS:
            raise BundleError(f"{shown}: {MANIFEST}: {key}: unknown key")
    for key in _MANIFEST_KEYS:
        if key not in manifest:
            raise BundleError(f"{shown}: {MANIFEST}: {key}: required key is missing")
    if manifest["format"] != FORMAT:
        raise BundleError(f"{shown}: {MANIFEST}: format: expected {FORMAT}, got {describe(manifest['format'])}")
    if manifest["payload"] != PAYLOAD:
        raise BundleError(f"{shown}: {MANIFEST}: payload: only {PAYLOAD} is accepted, got "
                          f"{describe(manifest['payload'])}")
    for key, kind in _MANIFEST_TYPES.items():
        value = manifest[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise BundleError(f"{shown}: {MANIFEST}: {key}: expected a {_KIND_WORDS[kind]}, got {describe(value)}")
    if not manifest["calls"] or not all(isinstance(c, dict) for c in manifest["calls"]):
        raise BundleError(f"{shown}: {MANIFEST}: calls: expected a non-empty list of mappings, got "
                          f"{describe(manifest['calls'])}")
    state = manifest["state"] or {}
    if not isinstance(state, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in state.values()):
        raise BundleError(f"{shown}: {MANIFEST}: state: expected a mapping of ints, got {describe(state)}")
    return manifest


_KIND_WORDS = {str: "string", int: "whole number", dict: "mapping", list: "list"}


def _load_tensors(path: Path, shown: str, entries: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The payload's tensors, each checked against its manifest entry (header first, then dtype, shape, sha256)."""
    header = _check_safetensors_header(path / PAYLOAD, shown)
    stored_names = set(header) - {"__metadata__"}
    if stored_names != set(entries):
        raise BundleError(f"{shown}: tensors: the payload holds {sorted(stored_names - set(entries))[:8]} not in "
                          f"the manifest and lacks {sorted(set(entries) - stored_names)[:8]}")
    for key, entry in entries.items():
        _check_manifest_entry(f"{shown}: tensors.{key}", entry, header[key])
    try:
        tensors = load_file(str(path / PAYLOAD))
    except Exception as exc:  # noqa: BLE001 - the parser's own refusal of a payload the checks above let through
        raise BundleError(f"{shown}: {PAYLOAD}: not a valid safetensors file: {str(exc)[:200]}") from exc
    for key, entry in entries.items():
        if raw_sha256(tensors[key]) != entry["sha256"]:
            raise BundleError(f"{shown}: tensors.{key}: sha256 differs from the manifest (tampered or corrupt)")
    return tensors


def load_bundle(path: str | Path) -> RecordedScenario:
    """Read, verify and return the bundle at ``path``."""
    path = Path(path)
    shown = str(path)
    manifest = _read_manifest(path, shown)
    entries = manifest["tensors"]
    tensors = _load_tensors(path, shown, entries)
    raw_calls = manifest["calls"]
    raw = {
        "name": manifest["name"], "family": manifest["family"],
        "description": f"recorded bundle {path.name}", "seed": 0, "worlds": [manifest["world"]],
        "size": "cpu" if manifest["provenance"].get("device", "cpu") == "cpu" else "gpu",
        "config": manifest["config"],
        "calls": [{k: v for k, v in c.items() if k in ("rows", "steps", "params")} for c in raw_calls],
        "expect": {"outcome": "golden"},
    }
    if manifest["family"] in FAMILIES and facts(manifest["family"]).routes_experts:
        # The builder option is unused on replay; any count that every world divides will do.
        top_k = manifest["config"].get("top_k", 8)
        if isinstance(top_k, int) and not isinstance(top_k, bool) and 0 < top_k <= 1024 and 0 < manifest["world"] <= 72:
            raw["inputs"] = {"experts": top_k * manifest["world"]}
    base = validate(raw, f"{shown}/{MANIFEST}")
    fields = {f: getattr(base, f) for f in Scenario.__dataclass_fields__}
    layouts = {k: e["layout"] for k, e in entries.items() if e.get("layout") is not None}
    return RecordedScenario(**fields, world=int(manifest["world"]), state=manifest["state"] or {},
                            provenance=dict(manifest["provenance"]), tensors=tensors, layouts=layouts)


__all__ = ["BundleError", "RecordedScenario", "load_bundle", "read_yaml_mapping", "save_bundle"]


# The payload's checks and the view rebuilding, for the other manifest that rides on this payload format
# (harness.recording.rank_bundle: one rank of a recorded world).
plain = _plain
load_checked_tensors = _load_tensors
with_layout = _with_layout
