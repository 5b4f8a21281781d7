"""``python -m harness record``: record a scenario's world as a user's job would be recorded, and replay it.

- ``capture --family F --scenario NAME --out DIR [--world N] [--impl golden|kernel]``:
  run the scenario's launch script (the inputs every rank agrees on; launches
  that expect an error are left out, harness-level injections are not acted
  on) with ``N`` ranks (threads over ``golden.comm.ThreadWorld``, or
  ``kernels.fabric.VirtualFabric`` for kernels), every rank's family system
  wrapped in ``rankcheck.recording`` (``harness.recording.writer``): ``DIR``
  is a world recording, the one format every recording path writes, with no
  window bound (every call kept).
- ``replay DIR [--impl golden|kernel]``: ``harness replay --bundle DIR``
  (``harness.recording.replay``): rebuild the recorded world, replay every
  rank, compare with the recording. Exit 0 identical, 1 a mismatch or a
  divergence, 2 a bad recording or bad arguments.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any, Sequence

from harness.families import NotAvailable, adapter, catalog
from harness.recording.rebuild import run_world
from harness.recording.replay import run_bundle_replay
from harness.recording.writer import WORLD_MANIFEST, recording
from harness.wire.command_line import HelpFormatter, command_parser
from scenarios.bundle import BundleError


def capture(family: str, scenario_name: str, out_dir: str | Path, *, world: int | None = None,
            impl: str = "golden", overwrite: bool = False) -> tuple[Path, list[str]]:
    """Run scenario ``family/scenario_name`` with every rank recorded into ``out_dir``; return (path, notes)."""
    cases = catalog.select(catalog.discover(), family=family, names=[scenario_name])
    scenario = catalog.load(cases[0].path)
    world = world or min(scenario.worlds)
    if world not in scenario.worlds:
        raise ValueError(f"--world: {family}/{scenario_name} runs at {list(scenario.worlds)}, got {world}")
    fam = adapter(family)
    fam.check_available(impl)
    static, config, launches = catalog.plan(scenario, world, 0)
    config.update(fam.start_config(scenario.initial_state()))
    runnable = [launch for launch in launches if launch.expected_error is None]
    notes = [f"launch {launch.index} left out: it expects an error" for launch in launches if launch.expected_error]
    if scenario.harness_injections():
        notes.append(f"harness injections not acted on: {sorted({i.kind for i in scenario.harness_injections()})}")
    if not runnable:
        raise ValueError(f"--scenario: {family}/{scenario_name} has no launch that completes normally")
    path = Path(out_dir)
    if (path / WORLD_MANIFEST).exists():
        if not overwrite:
            raise FileExistsError(f"--out: {path} already holds a recording (pass --overwrite to replace it)")
        shutil.rmtree(path)

    def body(handle: Any) -> None:
        """Build this rank's system and run the script through its recording."""
        system = fam.make_system(impl, handle, {k: v.clone() for k, v in static.items()}, dict(config))
        with recording(system, path, family=family, config=config, static=static, rank=handle.rank, world=world,
                       max_calls=None, max_bytes=None) as recorded:
            for launch in runnable:
                recorded.launch(launch.agreed_inputs, launch.agreed_params)

    run_world(impl, world, body)
    return path, notes


def build_parser() -> argparse.ArgumentParser:
    """The ``rankcheck record`` command line."""
    parser = command_parser("record", description="Capture and replay recorded bundles.")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    cap = sub.add_parser("capture", help="run a scenario with every rank recorded (a world recording)",
                         formatter_class=HelpFormatter,
                         description="Run a scenario with every rank recorded, as rankcheck.recording records a job.")
    cap.add_argument("--family", required=True, help="the scenario's family")
    cap.add_argument("--scenario", required=True, help="scenario name within the family")
    cap.add_argument("--out", required=True, help="recording directory to write")
    cap.add_argument("--world", type=int, default=None, help="ranks (default: the scenario's smallest world)")
    cap.add_argument("--impl", choices=("golden", "kernel"), default="golden", help="the implementation recorded")
    cap.add_argument("--overwrite", action="store_true", help="replace a recording already at --out")
    rep = sub.add_parser("replay", help="replay a recording and compare with what it recorded (replay --bundle)",
                         formatter_class=HelpFormatter,
                         description="Replay a recording and compare with what it recorded (harness replay --bundle).")
    rep.add_argument("bundle", help="recording directory")
    rep.add_argument("--impl", choices=("golden", "kernel"), default="golden", help="the implementation replayed")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``record capture`` or ``record replay``; return the exit status."""
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if args.action == "replay":
        return run_bundle_replay(args.bundle, impl=args.impl)
    try:
        path, notes = capture(args.family, args.scenario, args.out, world=args.world, impl=args.impl,
                              overwrite=args.overwrite)
    except (BundleError, NotAvailable, ValueError, TypeError, FileExistsError) as exc:
        print(f"record capture: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"record: {note}")
    print(f"record: world recording written to {path} (replay: python -m harness replay --bundle {path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
