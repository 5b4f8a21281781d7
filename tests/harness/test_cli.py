"""The command line in-process: list, dispatch to other packages' modules, argument errors."""

from pathlib import Path

import pytest

from harness import cli
from harness.families import NotAvailable, adapter, system_class

SCENARIOS = str(Path(__file__).resolve().parent / "scenarios")


def test_list_shows_cases_with_worlds_and_expected_outcome(capsys):
    assert cli.main(["list", "--scenario-root", SCENARIOS]) == 0
    out = capsys.readouterr().out
    assert "tiny_hang" in out and "1,2,4,8" in out and "timeout(rank 1, launch 1)" in out


def test_dispatch_of_a_missing_module_is_a_clear_message(monkeypatch, capsys):
    monkeypatch.setitem(cli.DISPATCHED, "bench", ("harness.no_such_module", "a module that is not there"))
    assert cli.main(["bench", "--anything"]) == 2
    assert "harness.no_such_module is not available" in capsys.readouterr().err


def test_dispatch_passes_argv(monkeypatch):
    seen = []
    import types
    import sys

    module = types.ModuleType("harness._fake_dispatch")
    module.main = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "harness._fake_dispatch", module)
    monkeypatch.setitem(cli.DISPATCHED, "record", ("harness._fake_dispatch", "a stand-in"))
    assert cli.main(["record", "--out", "x"]) == 0 and seen == [["--out", "x"]]


def test_argparse_rejects_bad_values():
    with pytest.raises(SystemExit) as exc:
        cli.main(["validate", "--world", "0"])
    assert exc.value.code == 2


def test_family_adapters_name_their_modules_and_outputs():
    a = adapter("markov_sharded")
    assert a.config_for({"vocab": 8}, 4) == {"vocab": 8, "world": 4}
    assert a.start_config({"launches": 32766}) == {"launch_counter_start": 32766}
    assert adapter("allreduce_mhc").compared_outputs({"residual_out": 0, "extra": 1}) == ["residual_out"]
    with pytest.raises(ValueError, match="family must be one of"):
        adapter("nope")
    with pytest.raises(ValueError, match="would start at both"):
        adapter("allreduce_mhc").start_config({"generation_ll": 1, "generation_bt": 2})


def test_kernel_path_is_not_available_without_gpu_or_module(monkeypatch):
    import torch

    from harness.families import FamilyAdapter

    fam = FamilyAdapter("x", "golden.markov_sharded", "kernels.markov_sharded.nonexistent", "tp", {})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(NotAvailable, match="no CUDA device"):
        fam.check_available("kernel")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(NotAvailable, match="cannot import kernels.markov_sharded.nonexistent"):
        fam.check_available("kernel")


def test_golden_system_classes_are_found():
    import golden.markov_sharded

    assert system_class(golden.markov_sharded, prefer_prefix="Golden").__name__ == "GoldenMarkovSharded"
