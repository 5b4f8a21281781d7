"""References computed ahead of the ranks, on the CPU cores a GPU job leaves idle.

A realistic-size golden reference takes tens of seconds on one CPU core, and
a rank that needs one waits for it while its GPU idles. The references do
not depend on the kernels, so ``validate`` starts this pool before the first
job: a few background processes compute every golden-outcome case's
references into the shared ``harness.references.cache`` directory, heaviest first,
while the GPU runs the cases that need none (the cpu-size cases and the
fault cases run first). A rank that reaches a reference the pool is still
computing finds the pool's claim and waits for it (its case clock paused, as
for any reference); one the pool has stored it loads. The pool computes with
the golden code on the CPU, exactly what a rank would compute, so a cached
reference is the same bits whoever made it.

Work queue: one JSON file per (scenario file, world) under
``<run>/refpool/queue/``; a pool process takes an item by renaming its file
(atomic: exactly one process gets it), so the processes share the queue
without a coordinator. ``harness.launch.reference_pool`` starts the
processes (``python -m harness.references.pool``), each under the
harness's supervision, logging to ``<run>/logs/refpool<i>.log``. An item whose references are all stored
leaves a marker ``<cache>/items/<digest>.json`` (its reference keys; the
digest covers the golden code, the architecture, the scenario file and the
world): a later run skips the item while every one of those files exists,
and starts no process when nothing is left, so a warm run's CPU goes to its
jobs. An item some of whose references another process is computing (the
same unsharded reference at another world, or a rank's) goes back to the
end of the queue and gets its marker when it comes round complete; rank 0
of a case that ran without TP groups writes the marker of its (scenario,
world) too (``harness.rank.case_run``), so an item the ranks computed before the
pool reached it is not computed again by the next run's pool.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Sequence

from harness.families import adapter, catalog
from harness.families.arch_facts import choose_arch
from harness.references.cache import ReferenceCache, code_digest, reference_path
from harness.wire.atomic_file import atomic_write

# An item waiting for references another process computes comes back this many times, this far apart at least.
REQUEUE_LIMIT = 200
REQUEUE_PAUSE_S = 0.5


def needs_reference(case) -> bool:
    """Whether a case's ranks compare with golden references (no fault that ends them early)."""
    return "golden" in case.outcomes and not {"hang", "crash"} & set(case.harness_kinds)


def queue_items(pairs: Sequence[tuple[int, Sequence]]) -> list[dict]:
    """The pool's work, heaviest first: one item per golden-outcome (case, world), gpu size before cpu size."""
    items = [{"path": case.path, "key": case.key, "world": world, "size": case.size, "launches": case.launches}
             for world, cases in pairs for case in cases if needs_reference(case)]
    return sorted(items, key=lambda it: (it["size"] != "gpu", -it["launches"], it["key"], it["world"]))


def write_queue(directory: Path, items: Sequence[dict]) -> int:
    """Write one file per item into ``directory`` (named so that a sorted listing keeps their order); return the count."""
    directory.mkdir(parents=True, exist_ok=True)
    for index, item in enumerate(items):
        (directory / f"{index:05d}.json").write_text(json.dumps(item), encoding="utf-8")
    return len(items)


def take(directory: Path) -> dict | None:
    """Take the first untaken item of the queue (renamed to ``*.taken.<pid>``), or None when it is empty."""
    for todo in sorted(directory.glob("*.json")):
        taken = todo.with_name(f"{todo.stem}.taken.{os.getpid()}")
        try:
            os.rename(todo, taken)
        except FileNotFoundError:
            continue  # another process took it first
        return json.loads(taken.read_text(encoding="utf-8"))
    return None


def item_marker(item: dict, cache_dir: Path) -> Path:
    """Where the pool notes that every reference of ``item`` is stored: keyed by the golden code, the architecture,
    the scenario file's bytes and the world, so a changed scenario or golden is computed again."""
    h = hashlib.sha256(f"{code_digest()}|{choose_arch().arch}|{item['world']}|".encode())
    h.update(Path(item["path"]).read_bytes())
    return Path(cache_dir) / "items" / f"{h.hexdigest()[:40]}.json"


def all_stored(keys: Sequence[str], cache_dir: Path) -> bool:
    """Whether a reference file exists for every one of ``keys`` (its digest is checked when a rank loads it)."""
    return all(reference_path(cache_dir, key).exists() for key in keys)


def mark_stored(item: dict, keys: Sequence[str], cache_dir: Path) -> bool:
    """Write ``item``'s marker with its reference ``keys`` when every one of them is stored; return whether it was."""
    if not all_stored(keys, cache_dir):
        return False
    atomic_write(item_marker(item, cache_dir), json.dumps({"keys": list(keys)}))
    return True


def already_stored(item: dict, cache_dir: Path) -> bool:
    """Whether a past pool stored every reference of ``item`` and each file is still there (its digest is checked
    when a rank loads it; a rank computes a missing or bad one itself)."""
    try:
        keys = json.loads(item_marker(item, cache_dir).read_text(encoding="utf-8"))["keys"]
    except (OSError, ValueError, KeyError):
        return False
    return all_stored(keys, cache_dir)


def compute_item(item: dict, cache_dir: Path) -> tuple[int, int, int]:
    """Store every reference of one (scenario, world) item in the cache that no other process is computing; return
    (computed, already there, being computed elsewhere); the item's marker is written once nothing is pending."""
    scenario = catalog.load(item["path"])
    fam = adapter(scenario.family)
    static, config, calls = catalog.agreed_calls(scenario, int(item["world"]))
    config.update(fam.start_config(scenario.initial_state()))
    refs = ReferenceCache(cache_dir, scenario.family, fam.tp_key, fam.golden_config(config), static)
    present, keys, pending = 0, [], 0
    for inputs, params in calls:
        key = refs.key(inputs, params)
        keys.append(key)
        if refs.has(key):
            present += 1
            continue
        if refs.claimed(key):
            pending += 1
            continue  # another process computes it (the same reference at another world): the item comes back
        refs.get(key, lambda inputs=inputs, params=params: fam.reference(static, config, inputs, params))
    if not pending:
        mark_stored(item, keys, cache_dir)
    return refs.computed, present, pending


def requeue(directory: Path, item: dict) -> bool:
    """Put an item whose references others are computing back at the end of the queue (at most
    ``REQUEUE_LIMIT`` times); return whether it was."""
    attempts = int(item.get("attempts", 0)) + 1
    if attempts > REQUEUE_LIMIT:
        return False
    # "z" sorts after the numbered items, the nanoseconds keep the re-queued ones in order
    atomic_write(directory / f"z{time.time_ns():020d}.json", json.dumps(dict(item, attempts=attempts)))
    return True


def drain(queue_dir: Path, cache_dir: Path) -> int:
    """Compute queue items until the queue is empty; an item that fails is reported and skipped (exit 1 at the end)."""
    failed = 0
    while (item := take(queue_dir)) is not None:
        if item.get("attempts"):
            time.sleep(REQUEUE_PAUSE_S)  # what it waits for takes seconds: no busy loop over the queue's tail
        started = time.monotonic()
        try:
            computed, present, pending = compute_item(item, cache_dir)
            again = pending and requeue(queue_dir, item)
            print(f"refpool: {item['key']} world {item['world']}: {computed} computed, {present} cached, "
                  f"{pending} computed elsewhere{' (back in the queue)' if again else ''}, "
                  f"{time.monotonic() - started:.1f} s", flush=True)
        except Exception as exc:  # noqa: BLE001 - the ranks compute (and report) it themselves
            failed += 1
            print(f"refpool: {item['key']} world {item['world']}: {type(exc).__name__}: {exc}", flush=True)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Drain a reference queue into a cache directory (the pool's process body)."""
    parser = argparse.ArgumentParser(prog="python -m harness.references.pool", description=__doc__.split("\n")[0])
    parser.add_argument("--queue", required=True, help="queue directory written by validate")
    parser.add_argument("--cache-dir", required=True, help="the reference cache directory (harness.references.cache)")
    args = parser.parse_args(argv)
    return drain(Path(args.queue), Path(args.cache_dir))


if __name__ == "__main__":
    sys.exit(main())
