"""Compiled kernel variants kept on disk, so that a process loads what another process compiled.

Why: ``cute.compile`` in CuTe DSL 4.8.1 never reads or writes the DSL's own
file cache (``CompileCallable._compile`` passes ``no_cache=True``; only a
direct call of a ``@cute.jit`` function uses ``CUTE_DSL_CACHE_DIR``), so
every process that needed a variant traced the Python kernel into MLIR, ran
the lowering pipeline and ptxas, and built an LLVM JIT engine for the host
code, however many processes had done the same before. Every rank process of
``validate`` is a fresh one.

Mechanism: a compiled function is exported with the DSL's AOT export,
``dump_to_object(prefix)``: an ELF relocatable object holding the host launch
code, the cubin (as the global ``<prefix>_cubin``) and, as metadata, the
signature, the function name and the kernel attributes. It is loaded with
``cutlass.cute.runtime.load_module`` (a JITLink engine over that object: no
tracing, no MLIR, no ptxas, no code generation), and the function under
``prefix`` is a ``CudaDialectJitCompiledFunction`` like a fresh compile's:
its ``to()`` loads the cubin through the same generated ``cuda_init`` /
``cuda_load_to_device`` functions, so the device code and the kernel
attributes are the same bytes as the compiling process's. The process that
compiles a variant stores it, then loads the stored object and launches that,
so every process of a run launches the same loaded object and a bad one is
caught where it was made. A function whose launch takes extra workspace
arguments (``total_added_arguments``, recorded only in a fresh compile's
module) is not stored.

Key (``artifact_key``): sha256 over this format's version, the kernel's class
(module and name), its ``key()`` (its compile-time configuration, the same
key as the process-wide cache of ``kernels.compile``), the compile options,
the digest of every file under ``kernels/`` and ``contracts/``
(``source_digest``: the kernel code and everything it may import from this
project; any edit there is another key for every variant) and the
toolchain (``toolchain``: CuTe DSL's own fingerprint of its Python sources
and compiler library, the versions of its wheels, the DSL settings that
enter its own compile key, the target architecture among them, and the host
machine). The object's symbol
prefix is derived from the key, so an object stored under another key's
name does not even have the function looked up.

Where: ``$RANKCHECK_KERNEL_ARTIFACTS`` (``validate`` sets it for its jobs:
``harness.references.cache.kernel_cache_env``); unset, nothing is stored or
read and every process compiles (the compile gate, which needs ptxas's
report, and the test suite). An entry is ``<dir>/<key[:2]>/<key>.kernel``:
the 8 bytes ``RKKERN1\\n``, the key (64 hex digits), the sha256 of the key
and the object (64 hex digits), then the object. It is written to a
temporary file and moved into place (``os.replace``), so a reader sees a
whole entry or none; concurrent processes that compile the same variant
write equal entries and the last one stays. A load refreshes the entry's
modification time (the run's trim removes the least recently used first).

Integrity: an entry whose magic, stored key or digest is wrong (torn,
truncated, edited, copied under another key's name), or that the DSL cannot
load, is removed before anything of it runs, counted (``discarded()``),
logged as a warning naming the file and why, and the variant compiled
again: a bad entry costs a compile, never a wrong kernel. The cache guards
against mistakes and torn files, not against someone who can write it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import platform
import tempfile
import threading
from pathlib import Path
from typing import Any, Sequence

ARTIFACTS_VAR = "RANKCHECK_KERNEL_ARTIFACTS"
FORMAT = "rankcheck-kernel-artifact-1"
MAGIC = b"RKKERN1\n"
HEX_DIGITS = 64
SUFFIX = ".kernel"
REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOTS = (REPO_ROOT / "kernels", REPO_ROOT / "contracts")
# The DSL's wheels: its Python sources and compiler library are fingerprinted by the DSL itself; the versions
# also cover its runtime and backend libraries (ptxas among them), which that fingerprint does not read.
DSL_DISTRIBUTIONS = ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl-libs-base", "nvidia-cutlass-dsl-libs-core",
                     "nvidia-cutlass-dsl-libs-cu12", "nvidia-cutlass-dsl-libs-cu13")

_LOG = logging.getLogger(__name__)
_DISCARD_LOCK = threading.Lock()
_discarded: list[str] = []


def directory() -> Path | None:
    """The artifact directory from ``$RANKCHECK_KERNEL_ARTIFACTS``, or None when it is unset or empty."""
    configured = os.environ.get(ARTIFACTS_VAR)
    return Path(configured).expanduser() if configured else None


def tree_digest(roots: Sequence[Path]) -> str:
    """sha256 over every file under ``roots`` (its path relative to its root's parent and its bytes), caches skipped."""
    digest = hashlib.sha256()
    for root in roots:
        for path in sorted(p for p in Path(root).rglob("*") if p.is_file()):
            if "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            digest.update(str(path.relative_to(Path(root).parent)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def source_digest() -> str:
    """The digest of this project's kernel code: every file under ``kernels/`` and ``contracts/``, once per process."""
    return tree_digest(SOURCE_ROOTS)


def _distribution_version(name: str) -> str | None:
    """The installed version of the distribution ``name``, or None when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def toolchain() -> str:
    """CuTe DSL's fingerprint of itself, its packages, its compile-relevant settings (arch resolved) and the host,
    once a process."""
    from cutlass.cutlass_dsl import CuTeDSL  # the DSL's fingerprint needs the DSL; importing this module must not

    dsl = CuTeDSL._get_dsl()
    arch = dsl.envar.arch  # resolved now (from CUTE_DSL_ARCH or the device), so that the settings name it
    return json.dumps({"dsl": dsl.get_version().hexdigest(), "arch": arch, "settings": dsl.envar.cache_key_str(),
                       "packages": {name: _distribution_version(name) for name in DSL_DISTRIBUTIONS},
                       "host": [platform.system(), platform.machine()]}, sort_keys=True)


def artifact_key(kernel: Any, options: str | None) -> str:
    """The hex sha256 naming ``kernel`` compiled with ``options`` by this code and toolchain (see the module)."""
    parts = [FORMAT, type(kernel).__module__, type(kernel).__qualname__, repr(kernel.key()), options or "",
             source_digest(), toolchain()]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def prefix_of(key: str) -> str:
    """The symbol prefix of the object stored under ``key`` (a C identifier derived from the key)."""
    return f"rk{key[:32]}"


def entry_path(root: Path, key: str) -> Path:
    """Where the entry of ``key`` lives under the artifact directory ``root``."""
    return Path(root) / key[:2] / f"{key}{SUFFIX}"


def payload_digest(key: str, payload: bytes) -> str:
    """The hex sha256 over ``key`` and the object bytes, as stored in an entry's header."""
    return hashlib.sha256(key.encode() + b"\0" + payload).hexdigest()


def encode(key: str, payload: bytes) -> bytes:
    """An entry's bytes: magic, key, digest, object."""
    return MAGIC + key.encode() + payload_digest(key, payload).encode() + payload


def decode(blob: bytes, key: str) -> tuple[bytes | None, str]:
    """``(object, "")`` from an entry's bytes when they are whole and stored under ``key``, else ``(None, why not)``."""
    header = len(MAGIC) + 2 * HEX_DIGITS
    if len(blob) <= header or not blob.startswith(MAGIC):
        return None, f"not an entry of this format ({len(blob)} bytes, expected {MAGIC!r} and a header)"
    stored_key = blob[len(MAGIC):len(MAGIC) + HEX_DIGITS].decode("ascii", "replace")
    if stored_key != key:
        return None, f"holds the entry of key {stored_key[:16]}..., not of {key[:16]}..."
    stored_digest = blob[len(MAGIC) + HEX_DIGITS:header].decode("ascii", "replace")
    payload = blob[header:]
    if stored_digest != payload_digest(key, payload):
        return None, "its digest does not match its bytes (torn, truncated or edited)"
    return payload, ""


def discarded() -> list[str]:
    """The entries this process removed as bad so far, each as ``path: why``."""
    with _DISCARD_LOCK:
        return list(_discarded)


def _discard(path: Path, why: str) -> None:
    """Remove the bad entry at ``path``, count it and log why."""
    path.unlink(missing_ok=True)
    with _DISCARD_LOCK:
        _discarded.append(f"{path}: {why}")
    _LOG.warning("kernel artifact %s discarded (%s); the variant compiles again", path, why)


def load_object(payload: bytes, prefix: str) -> Any:
    """The compiled function ``prefix`` of an exported object, loaded through ``cutlass.cute.runtime.load_module``."""
    from cutlass.cute.runtime import load_module

    import cutlass.cute.export  # noqa: F401 - installs the DSL's load provider for exported objects

    # load_module reads a file path; it reads the whole object before returning, so the file can go at once.
    with tempfile.NamedTemporaryFile(prefix="rankcheck-kernel-", suffix=".o") as f:
        f.write(payload)
        f.flush()
        module = load_module(f.name)
    return module[prefix]


def load(root: Path, key: str) -> Any | None:
    """The compiled function stored under ``key`` in ``root``, or None when there is none or it was bad (removed)."""
    path = entry_path(root, key)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        _discard(path, f"unreadable: {exc}")
        return None
    payload, why = decode(blob, key)
    if payload is None:
        _discard(path, why)
        return None
    try:
        function = load_object(payload, prefix_of(key))
    except Exception as exc:  # noqa: BLE001 - whatever the DSL raises for an object it cannot load
        _discard(path, f"does not load: {type(exc).__name__}: {exc}")
        return None
    try:
        os.utime(path)  # most recently used, for the trim
    except OSError:
        pass  # a concurrent trim took it: the function is loaded already
    return function


def store(root: Path, key: str, function: Any) -> bool:
    """Export ``function`` and store it under ``key`` in ``root``; False (with a warning) when it cannot be stored."""
    if getattr(function, "total_added_arguments", 0):
        return False  # its workspace-argument count lives only in the fresh compile's module
    path = entry_path(root, key)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        import cutlass.cute.export  # noqa: F401 - installs the DSL's export provider

        blob = encode(key, function.dump_to_object(prefix_of(key)))
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_bytes(blob)
        os.replace(temporary, path)
    except Exception as exc:  # noqa: BLE001 - a variant that cannot be stored still runs, compiled
        temporary.unlink(missing_ok=True)
        _LOG.warning("kernel artifact %s not stored (%s: %s)", path, type(exc).__name__, exc)
        return False
    return True


__all__ = ["ARTIFACTS_VAR", "artifact_key", "decode", "directory", "discarded", "encode", "entry_path", "load",
           "load_object", "prefix_of", "source_digest", "store", "toolchain", "tree_digest"]
