"""One constructor signature for a public kernel class and its golden stand-in, written once in the family's contract.

A family's contract module (``contracts/<family>.py``) defines ``constructor``:
a function whose parameters are the public class's constructor keywords
(names, kinds, defaults, annotations) and which returns them by name, as the
class keeps them (e.g. an iterable as a list). The kernel class
(``kernels/<family>/host.py``) and its golden stand-in
(``golden/<family>/public.py``) both decorate ``__init__(self, arguments)``
with ``takes(contract.constructor)``: each then has that signature for
``inspect.signature``, ``help`` and a bad call's TypeError, and receives the
arguments as one dict. A stand-in adds its golden-only keywords (``arch``)
as ``takes``'s own keywords. Standard library only (``contracts/``'s rule).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

# Constructor arguments that are not data: left out of ``public_args`` (a rebuild passes its own).
NOT_DATA = ("group", "device", "diag", "flight_dir")


def public_args(arguments: dict[str, Any]) -> dict[str, Any]:
    """The constructor's ``arguments`` by name without those that are not data (``NOT_DATA``)."""
    return {name: value for name, value in arguments.items() if name not in NOT_DATA}


def takes(constructor: Callable[..., dict[str, Any]], **extra: Any) -> Callable[[Callable], Callable]:
    """Decorate ``__init__(self, arguments, **extra)`` to take ``constructor``'s parameters plus keyword-only
    ``extra`` (name: default) and pass ``constructor``'s return value as ``arguments``."""
    base = inspect.signature(constructor)
    added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=value) for name, value in extra.items()]
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    signature = base.replace(parameters=[self_parameter, *base.parameters.values(), *added], return_annotation=None)

    def decorate(init: Callable) -> Callable:
        """``init`` behind ``signature``."""

        @functools.wraps(init)
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            # Binding first makes a bad call's TypeError the same as a plain __init__'s, on either side.
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            given = dict(bound.arguments)
            del given["self"]
            own = {name: given.pop(name) for name in extra}
            init(self, constructor(**given), **own)

        __init__.__signature__ = signature  # what inspect.signature and help show, instead of (*args, **kwargs)
        return __init__

    return decorate


__all__ = ["NOT_DATA", "public_args", "takes"]
