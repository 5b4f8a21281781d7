"""A JSON header in a fixed-size ``uint8`` tensor, so every rank of a collective exchanges the same number of bytes.

The layout is a 4-byte little-endian payload length, then the JSON
(``sort_keys``) payload, then zeros. A header that does not fit raises
``HeaderTooLong`` naming its size and the limit: it is never truncated
(a truncated payload would not decode, or would decode to something else).
"""

from __future__ import annotations

import json
from typing import Any

import torch

LENGTH_BYTES = 4


class HeaderTooLong(ValueError):
    """A collective header whose JSON does not fit in its fixed-size buffer."""


def encode_header(header: Any, nbytes: int, what: str = "header") -> torch.Tensor:
    """``header`` as JSON in a ``uint8 [nbytes]`` tensor, or ``HeaderTooLong`` naming ``what``."""
    payload = json.dumps(header, sort_keys=True).encode()
    if len(payload) > nbytes - LENGTH_BYTES:
        raise HeaderTooLong(
            f"{what}: {len(payload)} bytes of JSON, expected at most {nbytes - LENGTH_BYTES} "
            f"(a {nbytes}-byte buffer less its {LENGTH_BYTES}-byte length)"
        )
    buf = torch.zeros(nbytes, dtype=torch.uint8)
    buf[:LENGTH_BYTES] = torch.tensor(list(len(payload).to_bytes(LENGTH_BYTES, "little")), dtype=torch.uint8)
    buf[LENGTH_BYTES : LENGTH_BYTES + len(payload)] = torch.tensor(list(payload), dtype=torch.uint8)
    return buf


def decode_header(buf: torch.Tensor) -> Any:
    """The header ``encode_header`` packed into ``buf``."""
    raw = bytes(buf.to("cpu").tolist())
    length = int.from_bytes(raw[:LENGTH_BYTES], "little")
    return json.loads(raw[LENGTH_BYTES : LENGTH_BYTES + length].decode())


__all__ = ["HeaderTooLong", "decode_header", "encode_header"]
