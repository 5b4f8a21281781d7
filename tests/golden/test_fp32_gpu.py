"""The golden fp32 emulation against the kernels' own PTX on the GPU (2 x 10^5 inputs per check).

``kernels/markov_common/probe.py`` runs single sequences of ``kernels/ptx.py`` (the
very text the Markov step kernel embeds) elementwise over CUDA tensors;
``harness.calibration.fp32`` holds the checks (the same ones ``harness golden
--probe`` records in the architecture's facts): every exact op must match the
golden bit for bit; tanhf's approximate range (``ex2.approx``/``rcp.approx``)
is bounded in fp32 ulps by ``golden.fp32.TANHF_ULP_BOUND`` and the
soft-capped cached logit in bf16 ulps by ``SOFT_CAP_BF16_ULPS``; the worst
differences are printed (run with ``-s``). The probe import is deliberately
not an importorskip: on a GPU machine a missing probe is a failure. The
golden side runs on the CPU, and it is most of the time: at the full 10^7
inputs per check it took 4 minutes for the noise alone, CPU work that kept
the GPU suite from finishing. So the test keeps what needs the device, every
contract on ``TEST_INPUTS`` inputs per check from the same generators, and
the 10^7-input sweep is the calibration command's (``python -m harness
golden --probe``, which records the verdicts in the architecture's facts).
"""

from __future__ import annotations

import pytest

from harness.calibration.fp32 import CHECKS, N

pytestmark = pytest.mark.gpu

# One chunk per check: enough to meet every input class the generators draw (specials, subnormals, wrapped low
# words, the approximate tanhf range), a fiftieth of the calibration's sweep.
TEST_INPUTS = N // 50


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: getattr(c, "__name__", None) or
                         f"{c.func.__name__}-{'-'.join(f'{k}={v}' for k, v in c.keywords.items())}")
def test_golden_contract_holds_on_this_gpu(check):
    from kernels.markov_common import probe  # noqa: PLC0415 - CuTe DSL, on a GPU only

    for result in check(probe, TEST_INPUTS, TEST_INPUTS, "cuda"):
        print(f"{result.name}: {result.verdict()} (worst {result.worst_ulps} {result.unit} ulp)")
        assert result.inputs > 0 and result.ok, f"{result.name}: {result.verdict()}"
