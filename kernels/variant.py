"""Distinct kernel symbols for the variants of one kernel class.

CuTe DSL 4.8.1 names a kernel's symbol after ``str()`` of the instance whose
``@cute.kernel`` method it compiles, with an object address removed: with
the default ``str`` every configuration of one class gets the same symbol,
and two of them loaded in one process can resolve to each other's code (seen
on the H200: the BT publish ran the LL publish's code). A kernel class that
derives from ``KernelVariant`` and defines ``key()``, its compile-time
configuration led by a name for the class, gets that configuration as its
string, hence a symbol of its own.
"""

from __future__ import annotations


class KernelVariant:
    """Base of the kernel classes: ``str(self)`` is ``key()`` joined by underscores."""

    def key(self) -> tuple:
        """The compile-time configuration that tells this variant from every other kernel's."""
        raise NotImplementedError

    def __str__(self) -> str:
        """The configuration as an identifier, which CuTe DSL mangles into the kernel's symbol."""
        return "_".join(str(part) for part in self.key())
