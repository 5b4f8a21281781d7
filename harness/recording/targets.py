"""The public kernel objects a recording recognizes, in one table, and how a replay rebuilds them.

``PUBLIC_CLASSES`` is the one table of the public API's classes
(docs/interfaces.md, "The kernels' public API"), gathered from each family's
home (``PUBLIC_CLASSES`` of ``harness/families/<family>/recording.py``,
found through ``harness.families.registry``; ``FAMILY_CLASSES`` keeps
them by family): per class, the modules of
its two implementations (the kernel class in ``kernels/``, its golden
stand-in with the same name, constructor keywords and method signatures in
``golden.public``) and per recorded method what the world analysis
compares across ranks: ``agreed``, the tensor arguments every rank passes
with the same bits (the replicated request state; a rank's own
contribution, logits or noise differ by rank and are compared by shape and
dtype only), and ``per_rank``, the plain arguments that differ by rank
(``vocab_offset``). Every other plain argument must be the same on every
rank.

An object is recognized by its class's name (or a base class's), so a
kernel class and its stand-in record alike. It gives its constructor
arguments as ``public_args`` (by name, without ``group``, ``device``,
``diag`` and ``flight_dir``; ``cls(**public_args, group=...)`` rebuilds it)
and, where it has one, its flight recorder's launch count as
``flight_launches``. ``build_public`` rebuilds one for a replay: the golden
stand-in over a ``golden.comm`` Comm, or the kernel class over a
``kernels.fabric`` provider; ``public_type`` is the class it builds
(the examples take theirs from it, by name).
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping

from harness.families.registry import plugins
from harness.recording.public_class import MethodFacts, PublicClass


def _discover() -> dict[str, tuple[PublicClass, ...]]:
    """Family -> its public classes (``PUBLIC_CLASSES`` of ``harness/families/<family>/recording.py``), where it has some."""
    return {family: tuple(module.PUBLIC_CLASSES) for family, module in plugins("recording").items()}


# Each family's public classes, by family in the families' order: the classes a family's name stands for.
FAMILY_CLASSES: dict[str, tuple[PublicClass, ...]] = _discover()
PUBLIC_CLASSES: dict[str, PublicClass] = {c.name: c for classes in FAMILY_CLASSES.values() for c in classes}


def public_class_of(obj: Any) -> PublicClass | None:
    """The table's entry for ``obj``'s class (matched by the class's or a base class's name), else None."""
    for klass in type(obj).__mro__:
        if klass.__name__ in PUBLIC_CLASSES:
            return PUBLIC_CLASSES[klass.__name__]
    return None


def public_class(name: str) -> PublicClass:
    """The table's entry named ``name`` (a ``ValueError`` naming the known classes otherwise)."""
    if name not in PUBLIC_CLASSES:
        raise ValueError(f"class: expected one of {sorted(PUBLIC_CLASSES)}, got {name!r}")
    return PUBLIC_CLASSES[name]


def method_facts(class_name: str, method: str) -> MethodFacts:
    """What is compared of ``class_name.method``'s calls (nothing special for a class outside the table)."""
    known = PUBLIC_CLASSES.get(class_name)
    return known.methods.get(method, MethodFacts()) if known is not None else MethodFacts()


def scratch(class_name: str, method: str) -> tuple[str, ...]:
    """The arguments ``class_name.method`` writes with values the golden stand-in does not model (its ``SCRATCH``).

    A replay does not compare them: a kernel recording replayed on the
    golden would differ there by design (the fused step's per-CTA partials).
    """
    if class_name not in PUBLIC_CLASSES:
        return ()
    stand_in = getattr(importlib.import_module(PUBLIC_CLASSES[class_name].golden_module), class_name, None)
    return tuple(getattr(stand_in, "SCRATCH", {}).get(method, ()))


def public_args_of(obj: Any, label: str) -> Mapping[str, Any]:
    """``obj.public_args``, checked to be a mapping by argument name."""
    args = getattr(obj, "public_args", None)
    if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
        raise TypeError(f"{label}: a {type(obj).__name__} must give its constructor arguments as public_args "
                        f"(a mapping by name), got {type(args).__name__}")
    return args


def flight_launches_of(obj: Any) -> int | None:
    """``obj.flight_launches`` (the flight recorder's launch count) where the object has one, else None."""
    value = getattr(obj, "flight_launches", None)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def build_public(class_name: str, impl: str, arguments: Mapping[str, Any], group: Any) -> Any:
    """A fresh ``class_name`` of ``impl`` built from its recorded constructor ``arguments`` over ``group``."""
    return public_type(class_name, impl)(**arguments, group=group)


def public_type(class_name: str, impl: str) -> type:
    """The class ``class_name`` of ``impl``: the kernel class (``kernels/``) or its golden stand-in (``golden.public``)."""
    return getattr(importlib.import_module(public_class(class_name).module(impl)), class_name)


__all__ = ["FAMILY_CLASSES", "PUBLIC_CLASSES", "MethodFacts", "PublicClass", "build_public", "flight_launches_of",
           "method_facts", "public_args_of", "public_class", "public_class_of", "public_type", "scratch"]
