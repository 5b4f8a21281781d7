"""The golden-bit store: digests of the golden loops' outputs, per scenario.

Layout: one small JSON file per family, in its own folder, ``golden/<family>/golden_bits.json``::

    {"format": 1,
     "entries": {
       "<scenario name>[@<variant>]": {
         "input_digest": "<sha256 hex>",
         "outputs": {"<output name>": "<sha256 hex>", ...},
         "provenance": {"producer": "golden", "torch": ..., "device": ...,
                        "git": ..., "date": ...}}}}

The key is the scenario's ``family/name`` plus an optional variant chosen by
the caller (the harness uses the world size, since allreduce contributions
are ``[tp, ...]``); the value holds the digest of the inputs the outputs were
computed from and one digest per output tensor (the harness flattens a run's
outputs to names such as ``launch3.tokens``).

Digests: ``tensor_digest`` is sha256 over ``dtype``, ``shape`` and the
tensor's raw bytes in row-major order (a strided view hashes as its
contiguous copy), so two tensors have one digest exactly when their bits,
dtype and shape agree; ``inputs_digest`` chains the digests of the static
and call inputs under their names.

Rules: ``check`` compares digests and raises ``GoldenMismatch`` naming the
scenario and the output; an entry recorded from other inputs is an
``InputDigestMismatch`` (the inputs changed: regenerate on purpose), a
missing entry a ``GoldenMissing``. ``record`` refuses to overwrite an entry
whose digests differ unless ``regenerate=True``: nothing is ever regenerated
silently. Writes go through a temporary file and an atomic rename under an
exclusive lock, so concurrent recorders never leave a torn file.
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import json
import os
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Mapping

import torch

from golden.families import FAMILIES

FORMAT = 1
DEFAULT_ROOT = Path(__file__).resolve().parent
FILE_NAME = "golden_bits.json"


class GoldenError(Exception):
    """Base of the store's errors."""


class GoldenMismatch(GoldenError):
    """An output's digest differs from the stored golden digest."""


class InputDigestMismatch(GoldenError):
    """The stored entry was recorded from other inputs."""


class GoldenMissing(GoldenError, KeyError):
    """No stored entry for the scenario (and variant)."""

    def __str__(self) -> str:
        """The message without KeyError's quoting."""
        return str(self.args[0]) if self.args else ""


def raw_bytes(tensor: torch.Tensor) -> bytes:
    """The tensor's elements as bytes, row-major, native (little-endian) order."""
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    if t.numel() == 0:
        return b""
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def raw_sha256(tensor: torch.Tensor) -> str:
    """sha256 hex of the tensor's raw bytes only."""
    return hashlib.sha256(raw_bytes(tensor)).hexdigest()


def tensor_digest(tensor: torch.Tensor) -> str:
    """sha256 hex of dtype, shape and raw bytes of ``tensor``."""
    h = hashlib.sha256()
    h.update(f"{str(tensor.dtype).removeprefix('torch.')}|{tuple(tensor.shape)}|".encode())
    h.update(raw_bytes(tensor))
    return h.hexdigest()


def inputs_digest(static: Mapping[str, torch.Tensor], *calls: Mapping[str, torch.Tensor]) -> str:
    """sha256 hex over the static and the calls' inputs: names, dtypes, shapes and bytes, in order."""
    h = hashlib.sha256()
    for group, tensors in [("static", static)] + [(f"call{i}", c) for i, c in enumerate(calls)]:
        for name in sorted(tensors):
            h.update(f"{group}.{name}={tensor_digest(tensors[name])};".encode())
    return h.hexdigest()


def _git_revision() -> str:
    """The repository's HEAD commit, or ``unknown`` outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent,
                             capture_output=True, text=True, timeout=10, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance(device: str) -> dict[str, str]:
    """Who made an entry: producer ``golden``, torch version, device, git revision, UTC date."""
    return {"producer": "golden", "torch": str(torch.__version__), "device": device,
            "git": _git_revision(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def _name(scenario: object) -> str:
    """``family/name`` of a scenario given by name or as an object with ``full_name``."""
    return scenario if isinstance(scenario, str) else getattr(scenario, "full_name")


class GoldenStore:
    """The store under ``root`` (default ``golden``: one ``<family>/golden_bits.json`` each)."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = DEFAULT_ROOT if root is None else Path(root)

    # -- files

    @staticmethod
    def _family(scenario: str) -> str:
        """The family of a ``family/name`` scenario name."""
        family, sep, name = _name(scenario).partition("/")
        if not sep or family not in FAMILIES or not name:
            raise ValueError(f"scenario: expected 'family/name' with family one of {', '.join(FAMILIES)}, "
                             f"got {scenario!r}")
        return family

    def path(self, family: str) -> Path:
        """The JSON file of ``family``."""
        return self.root / family / FILE_NAME

    def _read(self, family: str) -> dict:
        """The parsed file of ``family`` (empty when it does not exist)."""
        path = self.path(family)
        if not path.exists():
            return {"format": FORMAT, "entries": {}}
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
            raise GoldenError(f"{path}: not a golden store of format {FORMAT}")
        return data

    @contextmanager
    def _locked(self, family: str) -> Iterator[None]:
        """Hold an exclusive lock on ``family``'s file while reading and rewriting it."""
        self.path(family).parent.mkdir(parents=True, exist_ok=True)
        # The lock lives outside the package so the store's folders hold only their JSON files.
        tag = hashlib.sha256(str(self.path(family).resolve()).encode()).hexdigest()[:16]
        with open(Path(tempfile.gettempdir()) / f"rankcheck-golden-{tag}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, family: str, data: dict) -> None:
        """Write ``family``'s file atomically (sorted keys, one entry per block)."""
        path = self.path(family)
        tmp = path.with_suffix(f".json.tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    @staticmethod
    def key(scenario: str, variant: str = "") -> str:
        """The entry key of ``scenario`` and ``variant``."""
        return f"{_name(scenario)}@{variant}" if variant else _name(scenario)

    # -- API

    def lookup(self, scenario: str, variant: str = "") -> dict | None:
        """The stored entry, or None."""
        return self._read(self._family(scenario))["entries"].get(self.key(scenario, variant))

    def record(self, scenario: str, input_digest: str, outputs: Mapping[str, torch.Tensor], *,
               variant: str = "", device: str = "cpu", regenerate: bool = False) -> dict:
        """Store the digests of golden ``outputs`` computed from inputs with ``input_digest``.

        An existing entry with the same digests is kept (its provenance too);
        one that differs is replaced only with ``regenerate=True``, otherwise
        this raises ``InputDigestMismatch`` or ``GoldenMismatch``.
        """
        family = self._family(scenario)
        if not outputs:
            raise ValueError("outputs: expected at least one output tensor")
        digests = {name: tensor_digest(t) for name, t in sorted(outputs.items())}
        key = self.key(scenario, variant)
        with self._locked(family):
            data = self._read(family)
            old = data["entries"].get(key)
            if old is not None and old["input_digest"] == input_digest and old["outputs"] == digests:
                return old
            if old is not None and not regenerate:
                self._compare(key, old, input_digest, digests)
            entry = {"input_digest": input_digest, "outputs": digests, "provenance": provenance(device)}
            data["entries"][key] = entry
            self._write(family, data)
            return entry

    def check(self, scenario: str, input_digest: str, outputs: Mapping[str, torch.Tensor], *,
              variant: str = "") -> None:
        """Raise unless ``outputs`` have the stored digests for inputs with ``input_digest``."""
        key = self.key(scenario, variant)
        entry = self.lookup(scenario, variant)
        if entry is None:
            raise GoldenMissing(f"{key}: no golden bits stored in {self.path(self._family(scenario))}; "
                                f"record them with `make golden`")
        self._compare(key, entry, input_digest, {n: tensor_digest(t) for n, t in outputs.items()})

    def _compare(self, key: str, entry: dict, input_digest: str, digests: Mapping[str, str]) -> None:
        """Raise the first difference between ``entry`` and the given digests."""
        if entry["input_digest"] != input_digest:
            raise InputDigestMismatch(
                f"{key}: inputs differ from those the golden bits were recorded from "
                f"(stored input digest {entry['input_digest'][:16]}..., now {input_digest[:16]}...); "
                f"the builders or the scenario changed: regenerate on purpose with `make golden`")
        stored = entry["outputs"]
        missing = sorted(set(stored) - set(digests))
        extra = sorted(set(digests) - set(stored))
        if missing or extra:
            raise GoldenMismatch(f"{key}: outputs differ from the stored set: missing {missing}, "
                                 f"not stored {extra}")
        for name in sorted(stored):
            if stored[name] != digests[name]:
                raise GoldenMismatch(f"{key}: output {name}: digest {digests[name][:16]}... differs from "
                                     f"the golden {stored[name][:16]}... (recorded "
                                     f"{entry['provenance'].get('date', '?')} on "
                                     f"{entry['provenance'].get('device', '?')})")


_default = GoldenStore()


def record(scenario: str, input_digest: str, outputs: Mapping[str, torch.Tensor], **kw) -> dict:
    """``GoldenStore().record`` on the default store."""
    return _default.record(scenario, input_digest, outputs, **kw)


def check(scenario: str, input_digest: str, outputs: Mapping[str, torch.Tensor], **kw) -> None:
    """``GoldenStore().check`` on the default store."""
    _default.check(scenario, input_digest, outputs, **kw)


__all__ = ["GoldenError", "GoldenMismatch", "GoldenMissing", "GoldenStore", "InputDigestMismatch", "check",
           "inputs_digest", "provenance", "raw_bytes", "raw_sha256", "record", "tensor_digest"]
