"""Arguments and results of a recorded call as plain data plus named tensors, and back.

A recorded call keeps every argument as the caller passed it. ``encode``
turns one value into plain YAML data (what the bundle manifest holds) and
collects its tensors under stable names (what the safetensors payload
holds): a tensor becomes ``{"$tensor": path, "shape": [...], "dtype":
name}``, where ``path`` is the argument's name with one ``.<i>`` per tuple
or list position and one ``.<key>`` per mapping key (``mxfp8_out.0``,
``mxfp8_out.1``, ``call_inputs.x``); a tuple becomes ``{"$tuple": [...]}``,
a list ``{"$list": [...]}``, a mapping ``{"$dict": {...}}``, a
``torch.dtype`` ``{"$dtype": "bfloat16"}``, a ``torch.device``
``{"$device": "cuda:0"}``; None, bools, ints, floats and strings stay as
they are. Anything else is a ``TypeError`` naming the argument, raised
before the call. The shape and dtype ride in the manifest, so a call under
CUDA-graph capture, whose tensors are not copied, is still described.

``decode`` rebuilds the value from the plain data and the tensors by path
(on a device of the replay's choosing); ``tensor_refs`` lists the tensor
references of an encoded value, ``describe_value`` gives the comparable
fields the world analysis lines ranks' calls up by.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import torch

TENSOR, TUPLE, LIST, DICT, DTYPE, DEVICE = "$tensor", "$tuple", "$list", "$dict", "$dtype", "$device"
PLAIN = (type(None), bool, int, float, str)


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` -> ``bfloat16``."""
    return str(dtype).removeprefix("torch.")


def encode(value: Any, path: str, live: dict[str, torch.Tensor]) -> Any:
    """``value`` as plain data; each tensor it holds is put in ``live`` under its path (not copied here)."""
    if isinstance(value, torch.Tensor):
        live[path] = value
        return {TENSOR: path, "shape": list(value.shape), "dtype": dtype_name(value.dtype)}
    if isinstance(value, PLAIN):
        return value
    if isinstance(value, (tuple, list)):
        items = [encode(v, f"{path}.{i}", live) for i, v in enumerate(value)]
        return {TUPLE if isinstance(value, tuple) else LIST: items}
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str):
                raise TypeError(f"{path}: expected a mapping with str keys to record, got key {key!r}")
        return {DICT: {k: encode(v, f"{path}.{k}", live) for k, v in value.items()}}
    if isinstance(value, torch.dtype):
        return {DTYPE: dtype_name(value)}
    if isinstance(value, torch.device):
        return {DEVICE: str(value)}
    raise TypeError(f"{path}: cannot record a {type(value).__name__} (tensors, tuples, lists, str-keyed mappings, "
                    f"dtypes, devices and None/bool/int/float/str are recorded)")


def decode(value: Any, tensors: Mapping[str, torch.Tensor], device: torch.device | str | None = None) -> Any:
    """The value ``encode`` described, its tensors taken from ``tensors`` by path (moved to ``device`` when given)."""
    if not isinstance(value, dict):
        return value
    if TENSOR in value:
        path = value[TENSOR]
        if path not in tensors:
            raise KeyError(f"{path}: no recorded tensor (a call under CUDA-graph capture keeps no tensors)")
        tensor = tensors[path]
        return tensor if device is None else tensor.to(device)
    if TUPLE in value:
        return tuple(decode(v, tensors, device) for v in value[TUPLE])
    if LIST in value:
        return [decode(v, tensors, device) for v in value[LIST]]
    if DICT in value:
        return {k: decode(v, tensors, device) for k, v in value[DICT].items()}
    if DTYPE in value:
        return getattr(torch, value[DTYPE])
    if DEVICE in value:
        return torch.device(value[DEVICE])
    raise ValueError(f"not an encoded value: {value!r}")


def tensor_refs(value: Any) -> Iterator[dict]:
    """Every ``{"$tensor": path, ...}`` reference inside an encoded value, in order."""
    if isinstance(value, dict):
        if TENSOR in value:
            yield value
            return
        for key in (TUPLE, LIST):
            if key in value:
                for item in value[key]:
                    yield from tensor_refs(item)
        if DICT in value:
            for item in value[DICT].values():
                yield from tensor_refs(item)


def describe_value(name: str, value: Any, digests: Mapping[str, str], agreed: bool, out: dict[str, Any]) -> None:
    """Add ``value``'s comparable fields to ``out``: plain values by repr, tensors by shape, dtype (and bits if ``agreed``)."""
    refs = list(tensor_refs(value))
    if not refs:
        out[f"argument {name}"] = repr(decode_plain(value))
        return
    for ref in refs:
        out[f"argument {ref[TENSOR]} shape"] = list(ref["shape"])
        out[f"argument {ref[TENSOR]} dtype"] = ref["dtype"]
        if agreed and ref[TENSOR] in digests:
            out[f"argument {ref[TENSOR]} bits"] = digests[ref[TENSOR]][:12]


def decode_plain(value: Any) -> Any:
    """An encoded value without tensors as Python data (dtypes and devices as their names)."""
    if isinstance(value, dict):
        if TUPLE in value:
            return tuple(decode_plain(v) for v in value[TUPLE])
        if LIST in value:
            return [decode_plain(v) for v in value[LIST]]
        if DICT in value:
            return {k: decode_plain(v) for k, v in value[DICT].items()}
        if DTYPE in value:
            return f"torch.{value[DTYPE]}"
        if DEVICE in value:
            return value[DEVICE]
    return value


__all__ = ["decode", "decode_plain", "describe_value", "dtype_name", "encode", "tensor_refs"]
