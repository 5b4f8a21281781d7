"""Injections given on the command line (``--inject``): parsed, checked for one run, written into a scenario copy.

``replay --inject KIND:key=value,...`` adds a fault to the one scenario it
replays; ``validate --inject SCENARIO:KIND:key=value,...`` adds one to a
named scenario of the selection (the nightly plants its hang so:
``FAMILY/SCENARIO:hang:rank=1,launch=1,group=5``). Values are read as
YAML scalars. Each injection is checked field by field against the
scenario *as this run runs it*: its ranks against the TP group size, its
``group`` against the run's TP groups (a file listing worlds 1, 2 and 4
still accepts rank 1 at ``--world 2``), and an error names the argument and
that size, never a file.

The run then uses a copy of the scenario file with the injections added
(``write_injected_copy``), validated in memory before it is written, so no
message ever points at the copy; the copy keeps the scenario's name and
family, so its verdicts, its stored golden bits and its reference cache
entries are the scenario's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import yaml

from harness.families.catalog import Case, load
from scenarios.fields import Checker, ScenarioError
from scenarios.injections import InjectionContext, check_injection
from scenarios.schema import validate


def parse_injection(text: str) -> dict:
    """``kind:key=value,key=value`` as an injection mapping (ValueError naming the text otherwise)."""
    kind, sep, rest = text.partition(":")
    if not kind or (sep and not rest):
        raise ValueError(f"--inject: expected KIND:key=value,..., got {text!r}")
    out: dict = {"kind": kind}
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--inject {text!r}: expected key=value, got {item!r}")
        out[key] = yaml.safe_load(value)
    return out


def split_target(text: str) -> tuple[str, str]:
    """``SCENARIO:KIND:key=value,...`` as (scenario name, injection text); ValueError naming the text otherwise."""
    name, _, rest = text.partition(":")
    if not name or ":" not in rest or "=" in name:
        raise ValueError(f"--inject: expected SCENARIO:KIND:key=value,... (e.g. "
                         f"FAMILY/SCENARIO:hang:rank=1,launch=1,group=0), got {text!r}")
    return name, rest


class InjectArgumentChecker(Checker):
    """Field checks whose errors name one ``--inject`` argument and the size being run, not a file."""

    def __init__(self, text: str, where: str) -> None:
        super().__init__(f"--inject {text!r}")
        self.where = where

    def fail(self, path: str, message: str) -> None:
        """Raise the error for the injection's field ``path`` at the size being run."""
        raise ScenarioError(f"{self.source}: {path.lstrip('.') or 'kind'}: {message} at {self.where}")


def checked_injections(case: Case, texts: Sequence[str], size: int, *, groups: int = 1,
                       where: str | None = None) -> list[dict]:
    """The injection texts as mappings, each checked against ``case`` in TP groups of ``size`` ranks, ``groups`` of them.

    ``where`` names the size in the errors (default ``--world <size>``)."""
    scenario = load(case.path)
    extra = []
    for text in texts:
        raw = parse_injection(text)
        context = InjectionContext(InjectArgumentChecker(text, where or f"--world {size}"), scenario.family,
                                   scenario.config, scenario.calls, [size], len(scenario.launches()), groups=groups)
        check_injection(context, raw, "")
        extra.append(raw)
    return extra


def write_injected_copy(case: Case, extra: list[dict], texts: Sequence[str], root: Path,
                        worlds: Sequence[int] | None = None) -> Path:
    """Write ``case``'s file with ``extra`` injected (and its worlds narrowed to ``worlds``) under ``root``; return the copy."""
    raw = yaml.safe_load(Path(case.path).read_text(encoding="utf-8"))
    if worlds is not None:
        raw["worlds"] = list(worlds)
    raw["inject"] = list(raw.get("inject") or []) + extra
    # the combination (e.g. a second launch_counter) is checked here, in the words of the arguments
    where = f" at --world {' '.join(map(str, worlds))}" if worlds is not None else ""
    validate(raw, f"{case.key} with --inject {' '.join(texts)}{where}", family_dir=case.family)
    copy = root / case.family / f"{case.name}.yaml"
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return copy


__all__ = ["InjectArgumentChecker", "checked_injections", "parse_injection", "split_target", "write_injected_copy"]
