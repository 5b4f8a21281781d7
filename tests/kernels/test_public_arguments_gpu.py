"""``public_arguments.py`` on the GPU: every bad argument at every public entry point of the kernels is refused
with a ``ValueError`` or ``TypeError`` naming it, writes nothing, and each entry point's next valid call is golden
(the table the driver writes, ``python tests/kernels/public_arguments.py OUT.md``). One process, tp 1, tiny
shapes: past the compiles it takes seconds."""

from __future__ import annotations

import pytest

import public_arguments

pytestmark = pytest.mark.gpu


def test_every_bad_argument_is_refused_naming_it_with_nothing_written_and_the_next_call_golden():
    rows = public_arguments.run_all()
    failed = [row for row in rows if not row.passed]
    table = public_arguments.markdown(failed, "pytest tests/kernels/test_public_arguments_gpu.py (failed rows)")
    assert not failed, f"{len(failed)} of {len(rows)} rows failed:\n{table}"
