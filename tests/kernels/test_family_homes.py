"""Each kernel family has one folder under kernels/, and the shared kernel modules name none.

A family is ``kernels/<family>/`` (its kernels, host class, layout and
checks) plus ``contracts/<family>.py`` (what its kernel and golden share).
The family package declares its flight-recorder identity (``FLIGHT_CODE``,
``FLIGHT_KERNELS``) and ``kernels.flight`` finds it there. Everything else
under ``kernels/`` and ``contracts/`` (the shared floors, ``markov_common/``
included) names no family: a new family is added by adding its folders, not
by editing a shared module. The codes and kernel orders are compiled into
the kernels (each record's ``ident`` word), so they are pinned here.
"""

from __future__ import annotations

import re
from pathlib import Path

from kernels import flight

ROOT = Path(__file__).resolve().parents[2]


def test_every_family_package_declares_its_flight_identity_unchanged():
    assert flight.FAMILIES == {"markov_sharded": 1, "markov_fused": 2, "allreduce_mhc": 3}
    assert flight.KERNELS == {"markov_sharded": ("sample",),
                              "markov_fused": ("anchor", "step", "pick", "fill", "gather"),
                              "allreduce_mhc": ("publish", "owner_reduce", "consumer")}


def test_each_family_is_one_folder_with_its_contract():
    for family in flight.FAMILIES:
        assert (ROOT / "kernels" / family / "__init__.py").is_file(), family
        assert (ROOT / "contracts" / f"{family}.py").is_file(), family


def test_no_shared_kernel_or_contract_module_names_a_family():
    names = re.compile("|".join(re.escape(family) for family in flight.FAMILIES))
    homes = {ROOT / "kernels" / family for family in flight.FAMILIES}
    offenders = []
    for package in ("kernels", "contracts"):
        for path in sorted((ROOT / package).rglob("*")):
            if path.suffix not in (".py", ".json") or "__pycache__" in path.parts:
                continue
            if any(home in path.parents for home in homes) or path.parent == ROOT / "contracts" and \
                    path.stem in flight.FAMILIES:
                continue
            offenders += [f"{path.relative_to(ROOT)}:{n}" for n, line in
                          enumerate(path.read_text().splitlines(), 1) if names.search(line)]
    assert offenders == []
