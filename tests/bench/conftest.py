"""Fixtures of the bench tests: the small results document of ``bench_documents``, fresh or stored in a file."""

from __future__ import annotations

import copy
import json

import pytest
from bench_documents import small_document


@pytest.fixture
def document() -> dict:
    """A fresh copy of the small document."""
    return copy.deepcopy(small_document())


@pytest.fixture
def document_path(tmp_path, document) -> str:
    """The small document stored as ``bench-20261130T100000Z.json`` in a temporary directory."""
    path = tmp_path / "bench-20261130T100000Z.json"
    path.write_text(json.dumps(document))
    return str(path)
