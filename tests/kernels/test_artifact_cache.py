"""kernels/artifact_cache.py on the CPU: a stored variant is loaded, not compiled; a changed key input misses; a
bad entry is removed and the variant compiled again; the loaded object carries the compiled cubin, kernel
attributes and argument marshalling of the fresh compile.

Real compiles of the smallest family kernel (``HeadGemvKernel`` at dim 32, about 0.3 s each once the DSL is
up) for ``CUTE_DSL_ARCH=sm_90a``; each test starts with an empty process-wide cache (``kernels.compile``), as a
fresh rank process does, and a directory of its own. One test starts a second Python process (about 5 s:
torch and the DSL import) to show that a fresh process compiles nothing.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from kernels import artifact_cache  # noqa: E402
from kernels import compile as compile_mechanism  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def artifacts(tmp_path, monkeypatch):
    """An empty artifact directory in use, an empty process-wide cache, and the list of real compiles made."""
    root = tmp_path / "kernels"
    monkeypatch.setenv(artifact_cache.ARTIFACTS_VAR, str(root))
    monkeypatch.setattr(compile_mechanism, "_COMPILED", {})
    compiles = []
    real_compile = compile_mechanism.compile_now

    def counted(kernel, options):
        """The real compile, recorded."""
        compiles.append(kernel.key())
        return real_compile(kernel, options)

    monkeypatch.setattr(compile_mechanism, "compile_now", counted)
    return root, compiles


def head(dim=32, pdl=False):
    """The compiled ``HeadGemvKernel`` variant through the families' one compile path."""
    from kernels.markov_fused.head_gemv import compiled_kernel

    return compiled_kernel(dim, 0.0, pdl)


def entries(root: Path) -> list[Path]:
    """The stored entries under ``root``."""
    return sorted(root.rglob("*" + artifact_cache.SUFFIX))


def fresh_process(monkeypatch):
    """Forget every compiled variant of this process, as a new rank process starts."""
    monkeypatch.setattr(compile_mechanism, "_COMPILED", {})


def test_a_stored_variant_is_loaded_not_compiled(artifacts, monkeypatch):
    root, compiles = artifacts
    first = head()
    assert len(compiles) == 1 and len(entries(root)) == 1
    assert first.load_from_binary  # the compiling process launches the stored object too
    fresh_process(monkeypatch)
    again = head()
    assert len(compiles) == 1  # loaded
    assert again.load_from_binary and again is not first
    assert again.kernel_info == first.kernel_info


def test_a_changed_source_digest_misses_and_compiles(artifacts, monkeypatch):
    root, compiles = artifacts
    head()
    fresh_process(monkeypatch)
    monkeypatch.setattr(artifact_cache, "source_digest", lambda: "0" * 64)  # as after an edit under kernels/
    head()
    assert len(compiles) == 2 and len(entries(root)) == 2


def test_another_configuration_is_another_entry(artifacts):
    root, compiles = artifacts
    head(pdl=False)
    head(pdl=True)
    assert compiles == [("markov_head_gemv", "d32", "keep0", "nopdl"), ("markov_head_gemv", "d32", "keep0", "pdl")]
    assert len(entries(root)) == 2


@pytest.mark.parametrize("bad", ["flipped byte", "truncated", "another key's entry", "empty"])
def test_a_bad_entry_is_discarded_and_the_variant_compiled_again(artifacts, monkeypatch, bad):
    root, compiles = artifacts
    head(pdl=False)
    (entry,) = entries(root)
    blob = entry.read_bytes()
    if bad == "flipped byte":
        blob = blob[:-100] + bytes([blob[-100] ^ 0x01]) + blob[-99:]
    elif bad == "truncated":
        blob = blob[: len(blob) // 2]
    elif bad == "another key's entry":
        head(pdl=True)
        (other,) = [e for e in entries(root) if e != entry]
        blob = other.read_bytes()
    else:
        blob = b""
    entry.write_bytes(blob)
    discarded_before = len(artifact_cache.discarded())
    fresh_process(monkeypatch)
    compiled_before = len(compiles)
    function = head(pdl=False)
    assert len(compiles) == compiled_before + 1  # compiled again, the bad bytes never loaded
    (why,) = artifact_cache.discarded()[discarded_before:]
    assert why.startswith(str(entry))
    key = entry.stem
    payload, problem = artifact_cache.decode(entry.read_bytes(), key)  # stored again, whole
    assert payload is not None, problem
    assert function.load_from_binary


def test_decode_names_what_is_wrong():
    key, other = "a" * 64, "b" * 64
    blob = artifact_cache.encode(key, b"\x7fELF object bytes")
    assert artifact_cache.decode(blob, key) == (b"\x7fELF object bytes", "")
    assert "key" in artifact_cache.decode(blob, other)[1]
    assert "digest" in artifact_cache.decode(blob[:-1] + b"X", key)[1]
    assert "not an entry" in artifact_cache.decode(b"PK\x03\x04" + blob[4:], key)[1]
    assert "not an entry" in artifact_cache.decode(blob[:40], key)[1]


def test_every_key_input_changes_the_key(monkeypatch):
    from kernels.markov_fused.head_gemv_kernel import HeadGemvKernel

    kernel = HeadGemvKernel(32, l2_keep=0.0, pdl=False)
    base = artifact_cache.artifact_key(kernel, None)
    assert artifact_cache.artifact_key(kernel, None) == base  # deterministic
    assert artifact_cache.artifact_key(HeadGemvKernel(32, l2_keep=0.0, pdl=True), None) != base
    assert artifact_cache.artifact_key(kernel, "--gpu-arch sm_100a") != base
    with monkeypatch.context() as m:
        m.setattr(artifact_cache, "source_digest", lambda: "f" * 64)
        assert artifact_cache.artifact_key(kernel, None) != base
    with monkeypatch.context() as m:
        m.setattr(artifact_cache, "toolchain", lambda: json.dumps({"dsl": "another DSL build"}))
        assert artifact_cache.artifact_key(kernel, None) != base


def test_the_source_digest_follows_every_file_but_caches(tmp_path):
    tree = tmp_path / "kernels"
    (tree / "markov").mkdir(parents=True)
    (tree / "markov" / "step.py").write_text("THREADS = 256\n")
    (tree / "thresholds.json").write_text("{}\n")
    first = artifact_cache.tree_digest([tree])
    (tree / "markov" / "__pycache__").mkdir()
    (tree / "markov" / "__pycache__" / "step.cpython-311.pyc").write_bytes(b"\0")
    assert artifact_cache.tree_digest([tree]) == first  # byte-code caches are not source
    (tree / "markov" / "step.py").write_text("THREADS = 512\n")
    edited = artifact_cache.tree_digest([tree])
    assert edited != first
    (tree / "thresholds.json").write_text('{"bt_min_rows": 4}\n')
    assert artifact_cache.tree_digest([tree]) != edited  # data files count too
    assert {"kernels", "contracts"} == {root.name for root in artifact_cache.SOURCE_ROOTS}


def test_the_loaded_object_is_the_compiled_kernel(artifacts, monkeypatch):
    """Same cubin bytes, kernel attributes, signature and argument marshalling as the fresh compile's."""
    from cutlass import Int32, Int64
    from cutlass._mlir import ir
    import cuda.bindings.driver as driver

    from kernels.markov_fused.head_gemv_kernel import HeadGemvKernel

    monkeypatch.delenv(artifact_cache.ARTIFACTS_VAR)
    kernel = HeadGemvKernel(32, l2_keep=0.0, pdl=True)
    fresh = compile_mechanism.compile_now(kernel, None)
    cubins = []

    def collect(op):
        """Keep the device binary (the ``*_binary`` global the lowering leaves) of the fresh compile's module."""
        if op.name == "llvm.mlir.global" and ir.StringAttr(op.attributes["sym_name"]).value.endswith("_binary"):
            cubins.append(ir.StringAttr(op.attributes["value"]).value_bytes)
        return ir.WalkResult.ADVANCE

    fresh.ir_module.operation.walk(collect)
    root, _ = artifacts
    key = artifact_cache.artifact_key(kernel, None)
    assert artifact_cache.store(root, key, fresh)
    payload, problem = artifact_cache.decode(artifact_cache.entry_path(root, key).read_bytes(), key)
    assert payload is not None, problem
    assert cubins and all(cubin in payload for cubin in cubins)
    loaded = artifact_cache.load(root, key)
    assert loaded.load_from_binary and loaded.kernel_info == fresh.kernel_info
    assert loaded.execution_args.signature == fresh.execution_args.signature
    assert loaded.has_gpu_module and loaded.capi_func is not None
    assert all(loaded._get_cuda_init_and_load())  # what its to() calls to load the cubin into a context
    arguments = [Int64(0x7F0000001000), Int64(0x7F0000002000), Int64(0), Int64(0), Int32(8), Int32(32), Int32(132),
                 driver.CUstream(0x5EED)]
    widths = [8, 8, 8, 8, 4, 4, 4, 8]  # bytes of each argument as the launcher reads it

    def marshalled(function):
        """The bytes each argument slot of ``function``'s launch points at."""
        slots, keep_alive = function.generate_execution_args(*arguments)
        addresses = [slot if isinstance(slot, int) else slot.value for slot in slots]
        return [ctypes.string_at(address, width) for address, width in zip(addresses, widths, strict=True)]

    assert marshalled(fresh) == marshalled(loaded)
    assert marshalled(loaded)[5] == (32).to_bytes(4, "little")
    assert marshalled(loaded)[7] == (0x5EED).to_bytes(8, "little")


def test_without_a_directory_nothing_is_stored(tmp_path, monkeypatch):
    monkeypatch.delenv(artifact_cache.ARTIFACTS_VAR, raising=False)
    monkeypatch.setattr(compile_mechanism, "_COMPILED", {})
    function = head()
    assert not function.load_from_binary and function.ir_module is not None  # compiled here, as the gate needs


def test_a_fresh_process_compiles_nothing_the_first_one_stored(tmp_path):
    # Both processes are fresh children with one environment: this test's own pytest process may hold a DSL
    # initialised under another test's settings (its arch), whose key is rightly another.
    root = tmp_path / "kernels"
    probe = ("from kernels.compile_clock import compile_seconds, load_seconds\n"
             "from kernels.markov_fused.head_gemv import compiled_kernel\n"
             "f = compiled_kernel(32, 0.0, False)\n"
             "print(f.load_from_binary, compile_seconds(), load_seconds())\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{artifact_cache.ARTIFACTS_VAR: str(root)})

    def fresh_process() -> tuple[str, float, float]:
        """One child's answer: whether its function came from the directory, its compile and load seconds."""
        proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=900)  # a hang guard as tests/harness/hang_guard.py, not a speed bound
        assert proc.returncode == 0, proc.stderr
        loaded, compile_s, load_s = proc.stdout.split()
        return loaded, float(compile_s), float(load_s)

    first_loaded, first_compile_s, _ = fresh_process()
    assert first_compile_s > 0.0 and any(root.iterdir())  # compiled, then stored (and loaded back from the store)
    loaded, compile_s, load_s = fresh_process()
    assert loaded == "True" and compile_s == 0.0 and load_s > 0.0
