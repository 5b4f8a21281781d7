"""CPU tests of the diagnostic record: encode/decode round trip, torn and
foreign records, the JSON dump, and the device writer's PTX (compiled for
sm_90a without a GPU: stores, fences, printf and trap in the contract's order)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch

from kernels.diag import (
    MAGIC,
    RECORD_BYTES,
    DiagFormatError,
    DiagRecord,
    DiagReport,
    WaitKind,
    checksum,
    decode,
    encode,
    load_dump,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

REPORT = DiagReport(
    rank=3,
    launch=0xFFFFFFFE,
    step=-1,
    awaited_rank=7,
    expected_tag=32767,
    seen_tag=1,
    kind=int(WaitKind.MAILBOX_TAG),
    elapsed_ns=(5 << 32) + 123,
    timeout_ns=2_000_000_000,
    block=131,
    thread=511,
)


def test_layout_is_64_bytes_magic_first_checksum_last():
    words = encode(REPORT)
    assert RECORD_BYTES == 64 and len(words) == 16
    assert words[0] == MAGIC and MAGIC.to_bytes(4, "little") == b"RCKD"
    assert words[15] == checksum(words[1:15])


def test_round_trip_through_int32_words():
    signed = [w - (1 << 32) if w & 0x80000000 else w for w in encode(REPORT)]
    assert decode(signed) == REPORT
    assert decode(encode(REPORT)) == REPORT


def test_all_zero_means_nothing_written():
    assert decode([0] * 16) is None


def test_torn_record_is_flagged_not_hidden():
    words = encode(REPORT)
    words[4] = 9  # another writer's step, the checksum is the first writer's
    report = decode(words)
    assert report.torn and report.step == 9
    assert "torn" in report.describe()


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda w: w.__setitem__(0, 0x12345678), "bad magic"),
        (lambda w: w.__setitem__(1, 2), "version 2"),
        (lambda w: w.pop(), "has 16 words"),
    ],
)
def test_foreign_words_are_rejected(mutate, message):
    words = encode(REPORT)
    mutate(words)
    with pytest.raises(DiagFormatError, match=message):
        decode(words)


def test_checksum_weights_word_positions():
    payload = encode(REPORT)[1:15]
    swapped = list(payload)
    swapped[2], swapped[3] = swapped[3], swapped[2]
    assert checksum(swapped) != checksum(payload)
    with pytest.raises(ValueError, match="14 words"):
        checksum(payload[:-1])


def test_describe_names_rank_step_awaited_and_tags():
    text = REPORT.describe()
    assert "rank 3 launch 4294967294" in text and "MAILBOX_TAG wait for rank 7" in text
    assert "expected tag 32767, saw 1" in text and "block 131, thread 511" in text
    unknown = DiagReport(**{**REPORT.__dict__, "kind": 99, "awaited_rank": -1, "step": 4})
    assert "kind 99 wait for any rank" in unknown.describe() and "step 4" in unknown.describe()


def test_record_dump_and_load(tmp_path):
    record = DiagRecord(pin=False)
    assert record.read() is None
    with pytest.raises(RuntimeError, match="not in pinned memory"):
        _ = record.address
    path = tmp_path / "rank3.diag.json"
    assert record.dump(path, rank=3) is None
    assert json.loads(path.read_text())["record"] is None and load_dump(path) is None

    record.tensor.copy_(torch.tensor(encode(REPORT), dtype=torch.int64).to(torch.int32))
    assert record.read() == REPORT
    assert record.dump(path, rank=3, launch=9) == REPORT
    document = json.loads(path.read_text())
    assert document["format"] == "rankcheck-diag" and document["context"] == {"rank": 3, "launch": 9}
    assert document["record"]["kind_name"] == "MAILBOX_TAG" and document["problem"] is None
    assert load_dump(path) == REPORT
    record.reset()
    assert record.read() is None


def test_dump_of_garbage_records_the_problem(tmp_path):
    record = DiagRecord(pin=False)
    record.tensor[0] = 77
    path = tmp_path / "x.json"
    assert record.dump(path) is None
    assert "bad magic" in json.loads(path.read_text())["problem"]


def test_load_dump_rejects_other_json(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"format": "something-else", "words": [0] * 16}))
    with pytest.raises(DiagFormatError, match="expected 'rankcheck-diag'"):
        load_dump(path)


def test_device_writer_ptx_order_sm90a():
    """The writer's PTX: magic check, 15 relaxed.sys stores, membar.sys, magic store, membar.sys, printf, trap."""
    script = (
        "import sys; sys.path[:0] = [%r, %r]\n"
        "from diag_probe import DiagTrapProbe, compile_probe\n"
        "print(compile_probe(DiagTrapProbe(), keep_ptx=True).artifacts.PTX)\n"
    ) % (ROOT, HERE)
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    ptx_text = done.stdout
    assert ".target sm_90a" in ptx_text
    ops = re.findall(r"^\s*(ld\.relaxed\.sys|st\.relaxed\.sys|membar\.sys|call\.uni \(retval0\), vprintf|trap)", ptx_text, re.M)
    tail = ops[ops.index("st.relaxed.sys") - 1 :]
    assert tail == (
        ["ld.relaxed.sys"] + ["st.relaxed.sys"] * 15 + ["membar.sys", "st.relaxed.sys", "membar.sys"]
        + ["call.uni (retval0), vprintf", "trap"]
    ), ops


def test_a_call_mismatch_names_both_ranks_and_both_sizes():
    from dataclasses import replace

    report = replace(REPORT, kind=int(WaitKind.CALL_MISMATCH), step=2, expected_tag=64, seen_tag=32, elapsed_ns=0)
    text = decode(encode(report)).describe()
    assert text.startswith("rank 3 launch 4294967294 step 2: CALL_MISMATCH: rank 7 called with 32 bytes where "
                           "rank 3 called with 64"), text
    assert "timed out" not in text
