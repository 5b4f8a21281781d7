"""kernels.flight_device compiled on the CPU: the writers emit the documented instructions; the flag removes them."""

from __future__ import annotations

import os
import re

import pytest

pytest.importorskip("cutlass")
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

from kernels.compile import compiled  # noqa: E402

from flight_probe import FlightProbe  # noqa: E402


def _entry_ptx(kernel) -> str:
    """The PTX of ``kernel``'s entry function, compiled for sm_90a."""
    text = compiled(kernel, "--gpu-arch sm_90a --keep-ptx", remedy="test").artifacts.PTX
    text = text if isinstance(text, str) else text.decode()
    return text[text.index(".entry"):]


def test_the_recorder_takes_the_launch_atomically_and_stores_the_record_relaxed_at_system_scope():
    body = _entry_ptx(FlightProbe(flight=True))
    assert len(re.findall(r"atom\.add\.relaxed\.gpu\.global\.u32", body)) == 1
    # six 8-byte stores of the begin, two of the end, all relaxed.sys; no fence on the kernel's path
    assert len(re.findall(r"st\.relaxed\.sys\.global\.b64", body)) == 8
    assert "membar.sys" not in body and "fence.sc.sys" not in body
    assert len(re.findall(r"%globaltimer", body)) == 2


def test_an_end_by_the_thread_that_began_uses_the_kept_number_and_loads_nothing():
    kept, reread = _entry_ptx(FlightProbe(keep=True)), _entry_ptx(FlightProbe(keep=False))
    assert "ld.relaxed.gpu" not in kept and reread.count("ld.relaxed.gpu.global.b32") == 1
    assert kept.count("st.relaxed.sys.global.b64") == reread.count("st.relaxed.sys.global.b64") == 8


def test_the_variant_without_the_recorder_has_none_of_it():
    body = _entry_ptx(FlightProbe(flight=False))
    assert "atom." not in body and "st.relaxed.sys" not in body and "%globaltimer" not in body
    assert str(FlightProbe(flight=False)) != str(FlightProbe(flight=True))


def test_the_flag_must_be_a_bool():
    with pytest.raises(TypeError, match="flight: expected a bool"):
        FlightProbe(flight=1)
