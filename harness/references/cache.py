"""Reference outputs cached across runs: content-addressed, shared by concurrent ranks and nodes, bounded.

The unsharded reference of a launch is the same for every rank of a TP
group, for every launch of one call (repeats, replays), for every world size
whose inputs are equal, and for every later run on the same inputs with the
same golden code. So it is computed once and kept:

- Where: ``cache_root()`` (``kernels.cache_dir``: ``$RANKCHECK_CACHE_DIR``,
  else ``$XDG_CACHE_HOME/rankcheck`` or ``~/.cache/rankcheck``), under
  ``references/<key[:2]>/<key>.safetensors``.
  ``validate --no-cache`` points the ranks at ``<run>/refcache`` instead: the
  ranks of that run still share their references, no earlier run's are read.
- The key (``ReferenceCache.key``): sha256 over the golden code's digest
  (every module the reference's entry points import, found by following
  their imports through ``golden/``, ``contracts/`` and the adapters, the
  data files of those packages, and the torch version: ``code_digest``,
  ``harness.references.code_key``), the family, the config without its TP
  key, the static tensors, the call's agreed inputs (dtype, shape, bytes)
  and parameters. A change to any of them is another key, so a cached entry
  is never a stale answer; the cache holds reference tensors, never a
  verdict.
- Integrity: each file carries, in its safetensors metadata, its own key
  and the sha256 over that key and its tensors' bytes (``payload_digest``);
  it is written under its key's path (temporary file + ``os.replace``). On
  reading, a file that does not load, whose stored key is not the key asked
  for (an entry swapped or copied under another name) or whose digest
  differs (truncated, edited, forged without the key) is removed, the
  reference recomputed, and the discard counted and named in the rank's log
  and result (the case's verdict detail says how many were discarded): a
  bad entry costs a recomputation, never a verdict. The cache is not
  authenticated: it guards against mistakes and torn or stale files, not
  against someone who can write it and reproduce the format.
- Concurrency: the first rank that needs a reference claims it
  (``<key>.claim``, created exclusively through a hard link so it appears
  with its owner ``host pid start`` already written, ``start`` being the
  process's start time in clock ticks since boot, field 22 of
  ``/proc/<pid>/stat``), computes it, stores it
  atomically (temporary file + ``os.replace``) and drops the claim; the
  others wait for the file, beating their progress heartbeat, up to
  ``wait_s``, then compute it themselves. The owner refreshes the claim's
  modification time while it computes. A claim is dead when its owner is a
  process of this host that no longer exists or whose start time differs
  (the PID was reused by another process), or (another host's, on a shared
  file system) when it has not been refreshed for ``CLAIM_STALE_S``; a dead
  claim is taken over. An owner whose computation fails drops its claim, so
  the next rank computes it and meets the same error.
- Size: after each store the directory is trimmed to
  ``$RANKCHECK_CACHE_MAX_BYTES`` (default 32 GiB), least recently used first
  (a load refreshes an entry's modification time).
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from harness.families.registry import ADAPTER_MODULES, ADAPTERS
from kernels.artifact_cache import ARTIFACTS_VAR, SUFFIX as ARTIFACT_SUFFIX
from kernels.cache_dir import CACHE_DIR_VAR, cache_root
from harness.references.code_key import reference_sources
from harness.wire.processes import process_alive, process_start_time

MAX_BYTES_VAR = "RANKCHECK_CACHE_MAX_BYTES"
DEFAULT_MAX_BYTES = 32 << 30
REFERENCE_POLL_S = 0.02
# How long a rank waits for the rank computing a reference (which beats every HEARTBEAT_S meanwhile)
# before computing it itself; a realistic-size golden reference on one CPU core takes minutes.
REFERENCE_WAIT_S = 1800.0
HEARTBEAT_S = 5.0
# A claim of another host not refreshed for this long is taken over (its owner refreshes every HEARTBEAT_S).
CLAIM_STALE_S = 120.0
DIGEST_KEY = "rankcheck_payload_sha256"
ENTRY_KEY = "rankcheck_key"
REPO_ROOT = Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """The digest of this repository's reference code (``tree_digest`` of the repository root), once per process."""
    return tree_digest(REPO_ROOT)


def tree_digest(root: Path) -> str:
    """sha256 over every file a reference depends on in the tree at ``root`` (its imports, followed from the
    adapters and golden modules) and the torch version."""
    h = hashlib.sha256(f"torch {torch.__version__}|".encode())
    entry_points = {a.golden_module for a in ADAPTERS.values()} | set(ADAPTER_MODULES.values())
    for path in reference_sources(tuple(sorted(entry_points)), root):
        h.update(f"{path.relative_to(root)}|".encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def tensor_digest(h: Any, name: str, tensor: Any) -> None:
    """Feed a tensor's name, dtype, shape and bytes (not its strides) into hash ``h``."""
    t = tensor.detach().cpu().contiguous()
    h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
    if t.numel():
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())


def payload_digest(tensors: dict, key: str = "") -> str:
    """sha256 over ``key`` and the named tensors (sorted by name): what a stored file's metadata must repeat."""
    h = hashlib.sha256(f"{key}|".encode())
    for name in sorted(tensors):
        tensor_digest(h, name, tensors[name])
    return h.hexdigest()


def threading_ident() -> int:
    """The current thread's id (virtual ranks share a process)."""
    return threading.get_ident()


def _owner() -> str:
    """This process as a claim's owner: ``host pid start`` (start: clock ticks since boot, 0 where unknown)."""
    return f"{socket.gethostname()} {os.getpid()} {process_start_time(os.getpid()) or 0}"


def claim_dead(claim: Path) -> bool:
    """Whether a claim's owner is gone: a process of this host that no longer exists or whose PID another process
    now has (another start time), or another host's claim left unrefreshed."""
    try:
        owner = claim.read_text(encoding="utf-8").split()
        age = time.time() - claim.stat().st_mtime
    except FileNotFoundError:
        return False  # just dropped: look again at the next poll
    if len(owner) != 3 or not (owner[1].isdigit() and owner[2].isdigit()):
        return age > CLAIM_STALE_S  # torn or foreign: trust only its age
    host, pid, start = owner[0], int(owner[1]), int(owner[2])
    if host == socket.gethostname():
        now = process_start_time(pid)
        return not process_alive(pid) or (start != 0 and now is not None and now != start)
    return age > CLAIM_STALE_S


def kernel_cache_env(root: Path | None, run_dir: Path | None = None) -> dict:
    """The job environment for the caches of compiled kernels: this project's artifacts and CuTe DSL's file cache.

    ``$RANKCHECK_KERNEL_ARTIFACTS`` (``kernels.artifact_cache``: compiled
    variants exported as objects, which a process loads instead of compiling)
    is ``<root>/kernels``, or without a root (``--no-cache``) ``<run_dir>/kernels``,
    so the ranks of that run still share what they compiled and no earlier
    run's is read. ``CUTE_DSL_CACHE_DIR`` is ``<root>/cute-dsl``, off without a
    root; ``cute.compile`` itself never uses it (CuTe DSL 4.8.1 compiles with
    ``no_cache``), only the DSL's direct ``@cute.jit`` calls and its parse
    caches do. A directory the user chose (either variable) wins where there
    is a root. Both are trimmed like the references (``trim``) each time a run
    starts.
    """
    if root is None:
        env = {"CUTE_DSL_DISABLE_FILE_CACHING": "1"}
        if run_dir is not None:
            env[ARTIFACTS_VAR] = str(Path(run_dir) / "kernels")
        return env
    env = {}
    max_bytes = int(os.environ.get(MAX_BYTES_VAR, DEFAULT_MAX_BYTES))
    if not os.environ.get("CUTE_DSL_CACHE_DIR"):
        directory = root / "cute-dsl"
        directory.mkdir(parents=True, exist_ok=True)
        trim(directory, max_bytes, pattern="*")
        env["CUTE_DSL_CACHE_DIR"] = str(directory)
    artifacts = Path(os.environ.get(ARTIFACTS_VAR) or root / "kernels").expanduser()
    artifacts.mkdir(parents=True, exist_ok=True)
    trim(artifacts, max_bytes, pattern="*" + ARTIFACT_SUFFIX)
    env[ARTIFACTS_VAR] = str(artifacts)
    return env


def reference_path(directory: Path, key: str) -> Path:
    """Where the reference of ``key`` is stored under a cache ``directory``."""
    return Path(directory) / key[:2] / f"{key}.safetensors"


def trim(directory: Path, max_bytes: int, pattern: str = "*.safetensors") -> int:
    """Remove the least recently used files matching ``pattern`` until ``directory`` holds at most ``max_bytes``."""
    entries = []
    for path in directory.rglob(pattern):
        if not path.is_file():
            continue
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        entries.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in entries)
    removed = 0
    for _, size, path in sorted(entries):
        if total <= max_bytes:
            break
        path.unlink(missing_ok=True)  # a concurrent trim may have taken it already
        total -= size
        removed += 1
    return removed


class ReferenceCache:
    """Reference outputs of one case's config and static tensors, shared through ``directory`` (see the module)."""

    def __init__(self, directory: str | Path, family: str, tp_key: str, config: dict, static: dict,
                 *, max_bytes: int | None = None, shared_in_process: bool = False) -> None:
        self.directory = Path(directory)
        # the ranks of one process (a virtual job's threads) hand each other what they loaded or computed
        self._shared = _SHARED if shared_in_process else None
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = int(os.environ.get(MAX_BYTES_VAR, DEFAULT_MAX_BYTES)) if max_bytes is None else max_bytes
        base = hashlib.sha256(f"{code_digest()}|{family}|".encode())
        base.update(repr(sorted((k, repr(v)) for k, v in config.items() if k != tp_key)).encode())
        for name in sorted(static):
            tensor_digest(base, name, static[name])
        self._base = base
        self.computed = 0
        self.loaded = 0
        self.discarded = 0
        self.discarded_why: list[str] = []  # what was wrong with each discarded entry

    def key(self, inputs: dict, params: dict) -> str:
        """The digest of one launch's reference."""
        h = self._base.copy()
        for name in sorted(inputs):
            value = inputs[name]
            if hasattr(value, "shape"):
                tensor_digest(h, name, value)
            else:
                h.update(f"{name}={value!r}".encode())
        h.update(repr(sorted((k, repr(v)) for k, v in params.items())).encode())
        return h.hexdigest()[:40]

    def path(self, key: str) -> Path:
        """Where the reference of ``key`` is stored."""
        return reference_path(self.directory, key)

    def has(self, key: str) -> bool:
        """Whether a stored reference exists for ``key`` (not yet checked against its digest)."""
        return self.path(key).exists()

    def claimed(self, key: str) -> bool:
        """Whether a live owner is computing the reference of ``key`` now."""
        claim = self.path(key).with_suffix(".claim")
        return claim.exists() and not claim_dead(claim)

    def _load(self, path: Path, key: str) -> dict | None:
        """The stored reference at ``path`` when it loads, is the entry of ``key`` and matches its digest; a bad
        file is removed and the discard named (None)."""
        try:
            with safe_open(str(path), framework="pt") as f:
                meta = f.metadata() or {}
                tensors = {name: f.get_tensor(name) for name in f.keys()}
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - a torn or corrupt file: recompute it
            return self._discard(path, f"does not load ({type(exc).__name__})")
        if meta.get(ENTRY_KEY) != key:
            return self._discard(path, f"holds the entry of key {str(meta.get(ENTRY_KEY))[:40]!r}, not {key!r}")
        if payload_digest(tensors, key) != meta.get(DIGEST_KEY):
            return self._discard(path, "its tensors do not match the digest stored with them")
        try:
            os.utime(path)  # least recently used is trimmed first
        except FileNotFoundError:
            pass
        self.loaded += 1
        return tensors

    def _discard(self, path: Path, why: str) -> None:
        """Remove the bad entry at ``path``, count it and say why on this rank's log (its reference is recomputed)."""
        path.unlink(missing_ok=True)
        self.discarded += 1
        self.discarded_why.append(f"{path.name}: {why}")
        print(f"rankcheck: reference cache entry {path} discarded and recomputed: {why}", file=sys.stderr, flush=True)
        return None

    def _store(self, path: Path, key: str, outputs: dict) -> None:
        """Write ``outputs`` to ``path`` atomically with their key and digest, then trim the cache to its bound."""
        tensors = {k: v.detach().cpu().contiguous() for k, v in outputs.items()}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading_ident()}")
        save_file(tensors, str(tmp), metadata={ENTRY_KEY: key, DIGEST_KEY: payload_digest(tensors, key)})
        os.replace(tmp, path)
        trim(self.directory, self.max_bytes)

    def _claim(self, claim: Path) -> bool:
        """Create ``claim`` exclusively (True), or take over a dead one; False while a live owner holds it."""
        staged = claim.with_name(f".{claim.name}.{os.getpid()}.{threading_ident()}")
        claim.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(_owner(), encoding="utf-8")
        try:
            os.link(staged, claim)
            return True
        except FileExistsError:
            if not claim_dead(claim):
                return False
            claim.unlink(missing_ok=True)
            return self._claim(claim)
        finally:
            staged.unlink(missing_ok=True)

    def get(self, key: str, compute: Callable[[], dict], *, wait_s: float = REFERENCE_WAIT_S,
            heartbeat: Callable[[], None] = lambda: None) -> dict:
        """The reference for ``key``: this process's copy, else loaded, or computed (and stored) by the one rank
        that claims it."""
        if self._shared is None:
            return self._get_stored(key, compute, wait_s=wait_s, heartbeat=heartbeat)
        path = self.path(key)
        with self._shared.lock_of(path):
            found = self._shared.get(path)
            if found is not None:
                self.loaded += 1
                return found
            found = self._get_stored(key, compute, wait_s=wait_s, heartbeat=heartbeat)
            self._shared.put(path, found)
            return found

    def _get_stored(self, key: str, compute: Callable[[], dict], *, wait_s: float,
                    heartbeat: Callable[[], None]) -> dict:
        """The reference for ``key`` from the directory, or computed (and stored) by the one rank that claims it."""
        path = self.path(key)
        claim = path.with_suffix(".claim")
        deadline = time.monotonic() + wait_s
        beat = time.monotonic()
        owned = False
        while True:
            found = self._load(path, key) if path.exists() else None
            if found is not None:
                return found
            if self._claim(claim):
                owned = True
                # An owner that finished between the look above and this claim left the file behind.
                found = self._load(path, key) if path.exists() else None
                if found is not None:
                    claim.unlink(missing_ok=True)
                    return found
                break
            if time.monotonic() >= deadline:
                break  # the owner is too slow: compute it here, leave its claim alone
            if time.monotonic() - beat >= HEARTBEAT_S:
                heartbeat()
                beat = time.monotonic()
            time.sleep(REFERENCE_POLL_S)
        try:
            with _Heartbeat(heartbeat, claim if owned else None):
                outputs = compute()
            self.computed += 1
            self._store(path, key, outputs)
        finally:
            if owned:
                claim.unlink(missing_ok=True)
        return outputs


class _ProcessReferences:
    """References this process has loaded or computed, shared by its ranks (a virtual job's threads read the same
    ones): the most recent up to ``max_bytes``, handed out as they are (readers never write to them). An entry
    holds while its file is the one it came from (same size and modification time): a file rewritten, removed
    or trimmed since is read again, so the cache's digest check still sees every change."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._path_locks: dict[Path, threading.Lock] = {}
        self._entries: dict[Path, tuple[dict, int, tuple[int, int]]] = {}

    def lock_of(self, path: Path) -> threading.Lock:
        """The lock of ``path``: one rank of this process loads or computes it while the others wait."""
        with self._lock:
            return self._path_locks.setdefault(path, threading.Lock())

    def get(self, path: Path) -> dict | None:
        """The reference stored at ``path`` if this process holds it and the file is unchanged since."""
        stamp = _stamp(path)
        with self._lock:
            entry = self._entries.pop(path, None)
            if entry is None or stamp is None or entry[2] != stamp:
                return None
            self._entries[path] = entry  # most recently used last
            return entry[0]

    def put(self, path: Path, outputs: dict) -> None:
        """Hold ``outputs`` for ``path`` (as its file is now), dropping the least recently used beyond ``max_bytes``."""
        stamp = _stamp(path)
        if stamp is None:
            return
        size = sum(t.numel() * t.element_size() for t in outputs.values() if hasattr(t, "element_size"))
        with self._lock:
            self._entries[path] = (outputs, size, stamp)
            total = sum(entry[1] for entry in self._entries.values())
            for old in list(self._entries):
                if total <= self.max_bytes or old == path:
                    break
                total -= self._entries.pop(old)[1]


def _stamp(path: Path) -> tuple[int, int] | None:
    """``(size, modification time in ns)`` of ``path``, or None when it is missing."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, st.st_mtime_ns


_SHARED = _ProcessReferences(max_bytes=2 << 30)


class _Heartbeat:
    """Calls ``beat`` (and refreshes an owned claim) every ``HEARTBEAT_S`` seconds from a daemon thread."""

    def __init__(self, beat: Callable[[], None], claim: Path | None) -> None:
        self._beat = beat
        self._claim = claim
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="reference-heartbeat")

    def _run(self) -> None:
        """Beat until stopped."""
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self._beat()
                if self._claim is not None:
                    os.utime(self._claim)
            except Exception:  # noqa: BLE001 - a missed heartbeat only shortens the others' patience
                pass

    def __enter__(self) -> "_Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=HEARTBEAT_S + 1)


__all__ = ["CACHE_DIR_VAR", "MAX_BYTES_VAR", "REFERENCE_WAIT_S", "ReferenceCache", "cache_root", "claim_dead",
           "code_digest", "kernel_cache_env", "payload_digest", "reference_path", "tensor_digest", "tree_digest",
           "trim"]
