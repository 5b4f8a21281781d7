"""``python -m harness compile``: every kernel variant compiles, without spills where it must not.

Registry convention (for every kernel module under ``kernels/``):

    def compile_variants(arch: str) -> Iterable[tuple[str, Callable[[str], object], bool]]

yields ``(name, thunk, must_not_spill)`` for every variant the module's host
classes can launch. ``name`` is unique across the project (prefix it with the
family, e.g. ``markov.step[b512,...]``). ``thunk(options)`` runs
``cute.compile(..., options=options)`` once for that variant and returns the
compiled function; ``options`` is the string this gate builds
(``--gpu-arch <arch> remarks{ptx}``), which the thunk must pass through
unchanged (so a compile cache keyed by options still compiles once per
arch). ``must_not_spill`` marks a variant whose spill stores or loads fail
the gate. Every module under ``kernels/`` is imported, so a new one (e.g.
``kernels/<family>/host.py``) is found by being there, without a list to
update; a module without ``compile_variants`` is skipped; a module that
fails to import fails the gate.

How the figures are read: ``remarks{ptx}`` makes the DSL print ptxas's
report on the process's stderr; the gate captures file descriptor 2 around
each thunk and parses, per entry function, "Used N registers", "B bytes stack
frame, S bytes spill stores, L bytes spill loads" (a non-inlined callee's
frame is listed too and its spills count). The report may come plain or
word-wrapped inside a DSL remark (kernels that call printf get a "local
memory usage" remark quoting it), so it is matched with whitespace
collapsed; a variant without an entry's registers and frame is "NO REPORT"
and fails. A variant name registered twice fails. No GPU is needed: the
target comes from ``--gpu-arch`` (and ``CUTE_DSL_ARCH`` is set to the first
arch when unset, so importing the DSL never looks for a device). Every
variant really compiles: the gate ignores the artifact cache
(``$RANKCHECK_KERNEL_ARTIFACTS``, ``kernels.artifact_cache``), whose loaded
variants carry no ptxas report.

``--ptx-dir DIR`` keeps every variant's PTX (``DIR/<arch>/<variant>.ptx``),
so a change that must not alter the code is checked by running the gate on
the tree before and after and ``diff -r`` of the two directories. A
``--keep-ptx`` compile also makes the DSL write its own copy
(``cutlass___<function>.<arch>.ptx``) into its dump directory, the working
directory by default; the gate points it (``--dump-dir``) at one temporary
directory of the process, removed at exit, so nothing lands in the tree.

Exit status: 0 when every variant compiled and no must-not-spill variant
spilled; 1 otherwise (the table says which); 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import functools
import importlib
import io
import json
import os
import pkgutil
import re
import shlex
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

from harness.wire.command_line import command_parser
from kernels.artifact_cache import ARTIFACTS_VAR

ARCHES = ("sm_90a", "sm_100a")

# One alternation, matched over the report with every whitespace run collapsed
# to one space: the DSL word-wraps ptxas's output when it quotes it inside a
# remark (e.g. "ptxas detected local memory usage", printed for any kernel
# that calls printf), breaking lines between any two words, never inside one.
_PTXAS_EVENT = re.compile(
    r"Compiling entry function '(?P<entry>[^']+)' for '[^']+'"
    r"|Function properties for (?P<properties>[^\s:]+)"
    r"|(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, (?P<loads>\d+) bytes spill loads"
    r"|Used (?P<registers>\d+) registers"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class EntryReport:
    """ptxas's figures for one function: an entry, or a non-inlined callee with its own frame."""

    function: str
    registers: int = -1
    stack_bytes: int = -1
    spill_store_bytes: int = -1
    spill_load_bytes: int = -1
    entry: bool = True  # False: a non-inlined callee, whose spills count against the variant too


@dataclass
class VariantResult:
    """One variant compiled for one arch: its entries, or its error."""

    arch: str
    name: str
    must_not_spill: bool
    seconds: float = 0.0
    entries: list[EntryReport] = field(default_factory=list)
    error: str | None = None
    detail: str | None = None

    @property
    def spilled(self) -> bool:
        """Whether any function of the variant (entry or callee) stored or loaded spills."""
        return any(e.spill_store_bytes > 0 or e.spill_load_bytes > 0 for e in self.entries)

    @property
    def ok(self) -> bool:
        """Compiled, reported by ptxas, and not spilling where it must not."""
        if self.error is not None or not self.reported:
            return False
        return not (self.must_not_spill and self.spilled)

    @property
    def reported(self) -> bool:
        """Whether ptxas's figures (registers and stack/spills) were read for at least one entry function."""
        return any(e.entry and e.registers >= 0 and e.stack_bytes >= 0 for e in self.entries)

    def verdict(self) -> str:
        """A short status word for the table."""
        if self.error is not None:
            return "ERROR"
        if not self.reported:
            return "NO REPORT"
        if self.spilled:
            return "SPILL" if self.must_not_spill else "spill (allowed)"
        return "ok"


def parse_ptxas_report(text: str) -> list[EntryReport]:
    """The per-function figures in ptxas ``-v`` output, plain or word-wrapped
    (entry functions in order of appearance, then any callee with a frame).

    "Used N registers" belongs to the last entry announced; a stack/spill line
    belongs to the function named by the "Function properties for" before it
    (the last entry when none is named). A function announced twice (a report
    quoted twice) keeps one record.
    """
    flat = re.sub(r"\s+", " ", _ANSI.sub("", text))
    reports: dict[str, EntryReport] = {}
    current: EntryReport | None = None
    described: EntryReport | None = None
    for m in _PTXAS_EVENT.finditer(flat):
        if m.group("entry"):
            current = described = reports.setdefault(m.group("entry"), EntryReport(function=m.group("entry")))
            current.entry = True
        elif m.group("properties"):
            name = m.group("properties")
            described = reports.setdefault(name, EntryReport(function=name, entry=False))
        elif m.group("stack"):
            target = described or current
            if target is not None:
                target.stack_bytes, target.spill_store_bytes, target.spill_load_bytes = (
                    int(m.group(g)) for g in ("stack", "stores", "loads"))
        elif current is not None:
            current.registers = int(m.group("registers"))
    return [r for r in reports.values() if r.entry] + [
        r for r in reports.values() if not r.entry and r.stack_bytes >= 0]


def discover(package: str = "kernels") -> tuple[list[tuple[str, Callable]], list[tuple[str, str]]]:
    """Import every module of ``package`` (a module added later, e.g.
    ``kernels/<family>/host.py``, is found by being there): (module name,
    compile_variants) for those that define it, once per function (a
    re-export is not a second registry), and (module name, error) for those
    that fail to import."""
    found, failed, seen = [], [], set()
    pkg = importlib.import_module(package)
    # walk_packages imports subpackages to list them; a failing one is recorded
    # below, when it is imported by name, instead of aborting the walk.
    for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}.", onerror=lambda name: None):
        try:
            module = importlib.import_module(info.name)
        except Exception as exc:  # noqa: BLE001 - reported as a gate failure
            failed.append((info.name, f"{type(exc).__name__}: {exc}"))
            continue
        fn = getattr(module, "compile_variants", None)
        if callable(fn) and id(fn) not in seen:
            seen.add(id(fn))
            found.append((info.name, fn))
    return found, failed


def _capture_fd2(thunk: Callable[[], object]) -> tuple[str, BaseException | None]:
    """Run ``thunk`` with file descriptor 2 and ``sys.stderr`` redirected
    (the DSL prints its remarks from Python, ptxas from C); return what was
    written to either and the exception raised, if any."""
    sys.stderr.flush()
    saved = os.dup(2)
    error = None
    python_side = io.StringIO()
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            with contextlib.redirect_stderr(python_side):
                thunk()
        except Exception as exc:  # noqa: BLE001 - reported per variant
            error = exc
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode("utf-8", "replace")
    return text + "\n" + python_side.getvalue(), error



def _summary(error: BaseException) -> str:
    """One line naming a compile failure: the first line of the exception text
    that says "error" (the DSL's messages are multi-line), else its first line."""
    text = _ANSI.sub("", "".join(traceback.format_exception_only(type(error), error))).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    flagged = [line for line in lines if "error" in line.lower()]
    return ((flagged or lines or [type(error).__name__])[0])[:300]


def ptx_path(ptx_dir: str, arch: str, name: str) -> str:
    """Where ``--ptx-dir`` keeps a variant's PTX: ``<dir>/<arch>/<name with odd characters as _>.ptx``."""
    return os.path.join(ptx_dir, arch, re.sub(r"[^A-Za-z0-9_.,-]", "_", name) + ".ptx")


@functools.lru_cache(maxsize=None)
def dsl_dump_dir() -> str:
    """This process's temporary directory for the DSL's own dumps of kept PTX (removed at exit), never the cwd."""
    path = tempfile.mkdtemp(prefix="rankcheck-dsl-dump-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _write_ptx(compiled: object, path: str) -> None:
    """Write the PTX a ``--keep-ptx`` compile kept (``compiled.artifacts.PTX``) to ``path``."""
    text = compiled.artifacts.PTX
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text if isinstance(text, str) else text.decode("utf-8"))


def compile_one(arch: str, name: str, thunk: Callable[[str], object], must_not_spill: bool,
                ptx_dir: str | None = None) -> VariantResult:
    """Compile one variant for ``arch`` and read ptxas's figures; with ``ptx_dir``, keep its PTX there too."""
    result = VariantResult(arch=arch, name=name, must_not_spill=must_not_spill)
    start = time.monotonic()
    keep = f" --keep-ptx --dump-dir={shlex.quote(dsl_dump_dir())}" if ptx_dir else ""
    options = f"--gpu-arch {arch} remarks{{ptx}}" + keep
    text, error = _capture_fd2(
        lambda: _write_ptx(thunk(options), ptx_path(ptx_dir, arch, name)) if ptx_dir else thunk(options))
    result.seconds = time.monotonic() - start
    if error is not None:
        result.error = _summary(error)
        result.detail = _ANSI.sub("", "".join(traceback.format_exception(type(error), error, error.__traceback__)))
    result.entries = parse_ptxas_report(text)
    return result


def run_gate(
    arches: Iterable[str],
    registry: Iterable[tuple[str, Callable]],
    name_filter: str | None = None,
    progress: Callable[[VariantResult], None] | None = None,
    ptx_dir: str | None = None,
) -> list[VariantResult]:
    """Compile every variant of every registry entry for every arch."""
    results, seen = [], set()
    registry = list(registry)
    for arch in arches:
        for module_name, variants_of in registry:
            try:
                variants = list(variants_of(arch))
            except Exception as exc:  # noqa: BLE001 - a broken registry is a gate failure
                r = VariantResult(arch=arch, name=f"{module_name}.compile_variants", must_not_spill=True,
                                  error=f"{type(exc).__name__}: {exc}")
                results.append(r)
                continue
            malformed = [v for v in variants if not (isinstance(v, tuple) and len(v) == 3 and callable(v[1]))]
            if malformed:
                results.append(VariantResult(
                    arch=arch, name=f"{module_name}.compile_variants", must_not_spill=True,
                    error=f"must yield (name, thunk(options), must_not_spill) tuples, got {malformed[0]!r:.80}"))
                continue
            for name, thunk, must_not_spill in variants:
                if name_filter and not re.search(name_filter, name):
                    continue
                if (arch, name) in seen:
                    results.append(VariantResult(arch=arch, name=name, must_not_spill=True,
                                                 error=f"variant name registered twice (again by {module_name})"))
                    continue
                seen.add((arch, name))
                r = compile_one(arch, name, thunk, bool(must_not_spill), ptx_dir)
                results.append(r)
                if progress:
                    progress(r)
    return results


def render_table(results: list[VariantResult]) -> str:
    """A plain-text table: arch, variant, registers, stack, spills, verdict."""
    head = ("arch", "variant", "regs", "stack B", "spill st B", "spill ld B", "no-spill", "s", "status")
    rows = []
    for r in results:
        entries = r.entries or [EntryReport(function="-")]
        for e in entries:
            rows.append((r.arch, r.name, str(e.registers), str(e.stack_bytes), str(e.spill_store_bytes),
                         str(e.spill_load_bytes), "yes" if r.must_not_spill else "no", f"{r.seconds:.2f}",
                         r.verdict() + (f": {r.error}" if r.error else "")))
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    lines = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    lines += [fmt.format(*row) for row in rows]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The ``rankcheck compile`` command line."""
    parser = command_parser("compile", description=__doc__.splitlines()[0].split(": ", 1)[-1])
    parser.add_argument("--arch", action="append", choices=ARCHES,
                        help="target architecture (repeatable; default: all of %s)" % ", ".join(ARCHES))
    parser.add_argument("--filter", default=None, help="only variants whose name matches this regex (default: all)")
    parser.add_argument("--json", default=None, help="also write the results as JSON to this path (default: none)")
    parser.add_argument("--quiet", action="store_true", help="no per-variant progress lines")
    parser.add_argument("--ptx-dir", default=None,
                        help="also keep each variant's PTX as DIR/<arch>/<variant>.ptx (compare two trees "
                             "with diff -r; default: none kept)")
    return parser


def main(argv: list[str] | None = None, registry: Iterable[tuple[str, Callable]] | None = None) -> int:
    """Entry point of ``rankcheck compile``; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) if exc.code in (0, None) else 2
    arches = args.arch or list(ARCHES)
    os.environ.setdefault("CUTE_DSL_ARCH", arches[0])
    # ptxas's report comes only from a real compile: a variant loaded from the artifact cache has none.
    os.environ.pop(ARTIFACTS_VAR, None)
    failures = []
    if registry is None:
        registry, failed = discover("kernels")
        failures += [VariantResult(arch="-", name=f"import {m}", must_not_spill=True, error=e) for m, e in failed]

    def progress(r: VariantResult) -> None:
        if not args.quiet:
            regs = ",".join(str(e.registers) for e in r.entries) or "-"
            print(f"[{r.arch}] {r.name}: {r.verdict()} regs={regs} ({r.seconds:.2f} s)", flush=True)

    results = failures + run_gate(arches, registry, args.filter, progress, args.ptx_dir)
    print(render_table(results))
    bad = [r for r in results if not r.ok]
    print(f"\n{len(results) - len(bad)} of {len(results)} variants passed"
          + (f"; FAILED: {', '.join(f'{r.arch}:{r.name}' for r in bad)}" if bad else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{**asdict(r), "ok": r.ok, "verdict": r.verdict()} for r in results], f, indent=1)
    if not results:
        print("no kernel variants found", file=sys.stderr)
        return 1
    return 0 if not bad else 1


if __name__ == "__main__":
    raise SystemExit(main())
