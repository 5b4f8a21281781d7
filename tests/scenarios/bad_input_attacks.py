"""The bad-input attacks of issue 28, each planted in a temporary directory: what to plant, the command, and what it must say.

``ATTACKS`` is shared by tests/scenarios/test_bad_input.py (each row through
``harness.cli.main`` in-process, a few as real ``python -m harness``
processes) and by ``python tests/scenarios/bad_input_attacks.py OUT.md``,
which runs every row as a real process and writes the table kept as the
results' bad-input.md (row, command, exit code, first line of the message).

A scenario attack plants ``markov_sharded/basic.yaml`` (good) beside one bad
file in a fresh scenario root and runs ``list``: the good scenario must still
be listed, the bad file named, and the exit code 2. A bundle attack records a
one-rank world of ``markov_sharded/basic`` and corrupts one file of it, then
runs ``replay --bundle``.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GOOD = (ROOT / "scenarios" / "markov_sharded" / "basic.yaml").read_text()


def _bomb(levels: int = 9) -> str:
    """A YAML alias bomb: 9 levels of 9 aliases each (9^9 strings once expanded) in a few hundred bytes."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    prev = "a"
    for name in "bcdefghij"[:levels - 1]:
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
        prev = name
    return "\n".join(lines) + "\n"


def _scenario_root(tmp: Path, bad_name: str) -> tuple[Path, Path]:
    """A scenario root holding the good ``basic`` and the path where the bad file goes."""
    folder = tmp / "root" / "markov_sharded"
    folder.mkdir(parents=True)
    (folder / "basic.yaml").write_text(GOOD)
    return tmp / "root", folder / bad_name


def _with(**changes: object) -> str:
    """The good scenario renamed ``bad`` with ``changes`` to its config (dotted keys go into config)."""
    raw = yaml.safe_load(GOOD)
    raw["name"] = "bad"
    for key, value in changes.items():
        raw["config"][key] = value
    return yaml.safe_dump(raw, sort_keys=False)


def _write(text: str | bytes) -> Callable[[Path], None]:
    """A planter writing ``text`` at the bad file's path."""
    def plant(path: Path) -> None:
        path.write_bytes(text.encode() if isinstance(text, str) else text)
    return plant


def _symlink(target: str) -> Callable[[Path], None]:
    """A planter making the bad file a symlink to ``target`` (``SELF``: to itself, a loop)."""
    def plant(path: Path) -> None:
        path.symlink_to(path if target == "SELF" else target)
    return plant


def _fifo(path: Path) -> None:
    """Plant a FIFO (a reader without O_NONBLOCK would wait forever for a writer)."""
    os.mkfifo(path)


SCENARIO_ATTACKS: dict[str, tuple[Callable[[Path], None], str]] = {
    "alias bomb in description": (_write(_bomb() + GOOD.replace("description: ", "description_: ", 1)
                                         .replace("name: basic", "name: bad") + "description: *i\n"),
                                  r"bad\.yaml: not valid YAML: aliases expand to more than 10000 nodes"),
    "duplicate key (second expect:)": (_write(GOOD.replace("name: basic", "name: bad") +
                                              "expect: {outcome: error}\n"),
                                       r"bad\.yaml: not valid YAML: duplicate key 'expect' \(first given on line 13\)"),
    "non-UTF-8 bytes": (_write(GOOD.replace("name: basic", "name: bad").encode() + b"# \xff\xfe\n"),
                        r"bad\.yaml: not UTF-8 text \(byte \d+"),
    "symlink loop": (_symlink("SELF"), r"bad\.yaml: cannot read: Too many levels of symbolic links"),
    "[ x 10^5 (deep nesting)": (_write("[" * 100_000), r"bad\.yaml: not valid YAML: nesting deeper than 64 levels"),
    "symlink to /dev/zero": (_symlink("/dev/zero"), r"bad\.yaml: cannot read: a character device, expected a regular"),
    "FIFO": (_fifo, r"bad\.yaml: cannot read: a FIFO, expected a regular file"),
    "file of 1 MiB": (_write(GOOD.replace("name: basic", "name: bad") + "#" * (1 << 20) + "\n"),
                      r"bad\.yaml: file larger than the limit of 262144 bytes"),
    "max_reqs 10^9": (_write(_with(max_reqs=10**9)),
                      r"bad\.yaml: config: its largest tensor \(max_reqs x steps x vocab = 1000000000 x 4 x 4096\) "
                      r"would take \d+ bytes, more than the 137438953472 bytes"),
    "vocab 2^40": (_write(_with(vocab=2**40)), r"bad\.yaml: config\.vocab: expected int in \d+\.\.\d+, got 1099511627776"),
    "int of 5000 digits": (_write(_with(max_reqs=int("9" * 4000))), r"bad\.yaml: (not valid YAML|config\.max_reqs)"),
    "a string where the config mapping belongs": (
        _write(re.sub(r"(?m)^config: .*$", "config: 'x'", GOOD.replace("name: basic", "name: bad"))),
        r"bad\.yaml: config: expected a mapping, got 'x'"),
}

ALLREDUCE_CAPACITY = """name: bad
family: allreduce_mhc
description: capacity no GPU holds
seed: 1
worlds: [2]
size: cpu
config: {hidden: 256, hc: 4, capacity: 1000000000000}
calls:
  - {rows: 1}
expect: {outcome: golden}
"""


def _allreduce_root(tmp: Path) -> tuple[Path, Path]:
    """A scenario root whose bad file is an allreduce_mhc scenario."""
    root, _ = _scenario_root(tmp, "unused.yaml")
    (root / "allreduce_mhc").mkdir()
    return root, root / "allreduce_mhc" / "bad.yaml"


@dataclass
class Attack:
    """One row: plant it under ``tmp`` and return the ``harness`` argv; the output must match ``expect`` with exit 2."""

    row: str
    plant: Callable[[Path], list[str]]
    expect: str
    lists_good: bool = False


def _scenario_attack(row: str) -> Attack:
    """A row that plants one bad scenario file beside the good one and runs ``list``."""
    planter, expect = SCENARIO_ATTACKS[row]

    def plant(tmp: Path) -> list[str]:
        root, bad = _scenario_root(tmp, "bad.yaml")
        planter(bad)
        return ["list", "--scenario-root", str(root)]
    return Attack(row, plant, expect, lists_good=True)


def _capacity(tmp: Path) -> list[str]:
    """capacity 10^12 in an allreduce_mhc scenario."""
    root, bad = _allreduce_root(tmp)
    bad.write_text(ALLREDUCE_CAPACITY)
    return ["list", "--scenario-root", str(root)]


def _bomb_in_world(tmp: Path) -> list[str]:
    """The alias bomb in a recording's world.yaml."""
    world = record_world(tmp)
    (world / "world.yaml").write_text(_bomb() + (world / "world.yaml").read_text().replace("\nworld:", "\nfam: *i\nworld:", 1))
    return ["replay", "--bundle", str(world), "--impl", "golden"]


_RECORDED: list[Path] = []


def record_world(tmp: Path) -> Path:
    """A one-rank recording of markov_sharded/basic's first two calls, copied to ``tmp/world`` (recorded once)."""
    if not _RECORDED:
        import tempfile  # noqa: PLC0415

        template = Path(tempfile.mkdtemp(prefix="rankcheck-recorded-world-"))
        atexit.register(shutil.rmtree, template, True)
        _RECORDED.append(_record(template))
    shutil.copytree(_RECORDED[0], tmp / "world", symlinks=True)
    return tmp / "world"


def _record(tmp: Path) -> Path:
    """Record markov_sharded/basic's first two calls under ``tmp/world``."""
    sys.path.insert(0, str(ROOT / "tests" / "record"))
    import rankcheck  # noqa: PLC0415 - torch: only the bundle rows need it
    from recording_child import sharded_system  # noqa: PLC0415

    system, static, config, calls = sharded_system()
    directory = tmp / "world"
    with rankcheck.recording(system, directory, family="markov_sharded", config=config, static=static,
                             rank=0, world=1) as recorder:
        for inputs, params in calls[:2]:
            recorder.launch(inputs, params)
    return directory


def _bundle_dir(world: Path) -> Path:
    """The rank-0 bundle directory of a recorded world."""
    return world / yaml.safe_load((world / "rank0.yaml").read_text())["bundle"]


def _edit_manifest(edit: Callable[[dict], None]) -> Callable[[Path], list[str]]:
    """A row recording a world and editing its rank-0 bundle manifest with ``edit``."""
    def plant(tmp: Path) -> list[str]:
        world = record_world(tmp)
        manifest_path = _bundle_dir(world) / "manifest.yaml"
        manifest = yaml.safe_load(manifest_path.read_text())
        edit(manifest)
        manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False))
        return ["replay", "--bundle", str(world), "--impl", "golden"]
    return plant


def _edit_payload(edit: Callable[[bytes, dict], bytes]) -> Callable[[Path], list[str]]:
    """A row recording a world and rewriting its payload with ``edit(data, header)``."""
    def plant(tmp: Path) -> list[str]:
        world = record_world(tmp)
        payload = _bundle_dir(world) / "tensors.safetensors"
        raw = payload.read_bytes()
        (size,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + size])
        payload.write_bytes(edit(raw, header))
        return ["replay", "--bundle", str(world), "--impl", "golden"]
    return plant


def _with_header(raw: bytes, header: dict) -> bytes:
    """``raw``'s data under a re-encoded ``header``."""
    (size,) = struct.unpack("<Q", raw[:8])
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + raw[8 + size:]


def _lie_offsets(raw: bytes, header: dict) -> bytes:
    """The first tensor's end offset moved far past the data."""
    name = next(k for k in header if k != "__metadata__")
    header[name]["data_offsets"][1] += 10**9
    return _with_header(raw, header)


def _lie_shape(raw: bytes, header: dict) -> bytes:
    """The first tensor's header shape changed (offsets no longer span it)."""
    name = next(k for k in header if k != "__metadata__")
    header[name]["shape"] = [s * 2 for s in header[name]["shape"]] or [2]
    return _with_header(raw, header)


def _first_tensor(manifest: dict) -> dict:
    """The manifest entry of the bundle's first tensor."""
    return next(iter(manifest["tensors"].values()))


def _dup_calls(tmp: Path) -> list[str]:
    """Rank 0's entry listing call 0 twice."""
    world = record_world(tmp)
    entry = yaml.safe_load((world / "rank0.yaml").read_text())
    entry["calls"] = [0, 0]
    (world / "rank0.yaml").write_text(yaml.safe_dump(entry))
    return ["replay", "--bundle", str(world), "--impl", "golden"]


def _stride(manifest: dict) -> None:
    """A layout with a stride of 10^12 on the first tensor."""
    entry = _first_tensor(manifest)
    entry["layout"] = {"stride": [10**12] * len(entry["shape"]), "offset": 0}


def _unwritable_run_dir(tmp: Path) -> list[str]:
    """validate with a run directory that cannot be written (read-only: /sys for root, else a 0o555 directory)."""
    target = Path("/sys/rankcheck-run") if os.geteuid() == 0 else tmp / "ro" / "run"
    if os.geteuid() != 0:
        target.parent.mkdir()
        target.parent.chmod(0o555)
    return ["validate", "--launcher", "cpu", "--scenario", "markov_sharded/basic", "--world", "1", "--no-cache",
            "--run-dir", str(target)]


def _unwritable_cache(tmp: Path) -> list[str]:
    """validate with $RANKCHECK_CACHE_DIR where nothing can be written (set by the runner, see ``env_for``)."""
    return ["validate", "--launcher", "cpu", "--scenario", "markov_sharded/basic", "--world", "1",
            "--run-dir", str(tmp / "run")]


UNWRITABLE_CACHE = "/sys/rankcheck-cache"

ATTACKS: list[Attack] = [_scenario_attack(row) for row in SCENARIO_ATTACKS] + [
    Attack("capacity 10^12", _capacity, r"bad\.yaml: config\.capacity: expected int in 1\.\.2147483647"),
    Attack("alias bomb in a recording's world.yaml", _bomb_in_world,
           r"world\.yaml: not valid YAML: aliases expand to more than 10000 nodes"),
    Attack("truncated safetensors payload", _edit_payload(lambda raw, header: raw[:len(raw) // 2]),
           r"tensors\.safetensors: .*data_offsets: expected \[begin, end\] within the \d+ data bytes"),
    Attack("safetensors header length beyond the file", _edit_payload(lambda raw, h: struct.pack("<Q", 10**7) + raw[8:]),
           r"tensors\.safetensors: not a safetensors file \(header length 10000000 in a file of \d+ bytes\)"),
    Attack("safetensors offsets outside the data", _edit_payload(_lie_offsets),
           r"tensors\.safetensors: \S+: data_offsets: expected \[begin, end\] within"),
    Attack("safetensors shape that its offsets do not hold", _edit_payload(_lie_shape),
           r"tensors\.safetensors: \S+: data_offsets: \w+ \[.*\] takes \d+ bytes, the offsets give \d+"),
    Attack("manifest dtype differs from the payload", _edit_manifest(lambda m: _first_tensor(m).update(dtype="float64")),
           r"tensors\.\S+: payload has \w+ \[.*\], manifest says float64"),
    Attack("a string where the manifest's tensors mapping belongs", _edit_manifest(lambda m: m.update(tensors="x")),
           r"manifest\.yaml: tensors: expected a mapping, got 'x'"),
    Attack("a string where the manifest's provenance belongs", _edit_manifest(lambda m: m.update(provenance="x")),
           r"manifest\.yaml: provenance: expected a mapping, got 'x'"),
    Attack("stride of 10^12 in a layout", _edit_manifest(_stride),
           r"tensors\.\S+\.layout: strides \[1000000000000.*\] .* reach \d+ elements, more than the \d+ allowed"),
    Attack("duplicate calls in a rank's entry", _dup_calls,
           r"rank0\.yaml: calls: expected strictly increasing call numbers, got 0 after"),
    Attack("read-only run directory", _unwritable_run_dir, r"run directory \S+: cannot write: "),
    Attack("read-only cache directory", _unwritable_cache,
           r"cache directory \(\$RANKCHECK_CACHE_DIR.*\) /sys/rankcheck-cache: cannot write: "),
]


def env_for(attack: Attack) -> dict[str, str]:
    """The environment a row runs under (the cache row points the cache at a directory nothing can write)."""
    env = {"PYTHONPATH": str(ROOT)}
    if attack.row == "read-only cache directory":
        env["RANKCHECK_CACHE_DIR"] = UNWRITABLE_CACHE
    return env


def run_process(attack: Attack, tmp: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Plant ``attack`` under ``tmp`` and run it as ``python -m harness ...`` (its own process)."""
    argv = attack.plant(tmp)
    env = {**os.environ, **env_for(attack)}
    return subprocess.run([sys.executable, "-m", "harness", *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def message_line(output: str, pattern: str) -> str:
    """The output line matching ``pattern`` (else the last non-empty line)."""
    lines = [line for line in output.splitlines() if line.strip()]
    return next((line for line in lines if re.search(pattern, line)), lines[-1] if lines else "")


def write_table(out: Path) -> None:
    """Run every attack as a real process and write the markdown table to ``out``."""
    import tempfile  # noqa: PLC0415

    rows = ["| attack | command | exit | message (first matching line) |", "|---|---|---|---|"]
    tracebacks = 0
    for attack in ATTACKS:
        with tempfile.TemporaryDirectory() as tmp:
            done = run_process(attack, Path(tmp))
            output = done.stdout + done.stderr
            tracebacks += "Traceback" in output
            line = message_line(output, attack.expect).replace(tmp, "$TMP").replace("|", "\\|")
            command = "python " + " ".join(done.args[1:]).replace(tmp, "$TMP")
            rows.append(f"| {attack.row} | `{command}` | {done.returncode} | {line[:220]} |")
    rows.append("")
    rows.append(f"{len(ATTACKS)} attacks, {tracebacks} tracebacks.")
    out.write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    write_table(Path(sys.argv[1]))
