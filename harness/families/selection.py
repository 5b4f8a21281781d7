"""Choosing cases as pytest chooses tests: keyword expressions (``-k``) over a case's words, and name globs.

A case here is one scenario at one world under one launcher. Its words
(``case_words``) are the family, the scenario's name, its file's name,
the name of the scenario root (``scenarios``), ``world=N``, the launcher
and the case id
(``family/name[world=N,launcher=L]``); the pytest plugin
(``harness.pytest_plugin``) gives each item the same words, so one
expression selects the same cases through ``harness validate -k`` and
``pytest -k``.

``KeywordExpression`` follows pytest's grammar for ``-k``
(``_pytest.mark.expression``, not imported: pytest is a development
dependency, the harness runs without it)::

    expr     := and_expr ('or' and_expr)*
    and_expr := not_expr ('and' not_expr)*
    not_expr := 'not' not_expr | '(' expr ')' | ident
    ident    := (letter, digit, _ : + - . [ ] \\ /)+

An identifier holds for a case when it is a substring of one of the case's
words, ignoring case. An expression that does not parse is a ValueError
naming ``-k``, the column and what was expected.

``expand_globs`` turns the shell-style patterns of ``--scenario``
(``markov_*/nan*``: a pattern with ``/`` matches ``family/name``, one
without matches the name) into the scenario keys they match, in catalog
order; a pattern that matches nothing is a ValueError naming the option.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path
from typing import Sequence

from harness.families.catalog import Case, did_you_mean
from harness.wire.case_result import case_id

_TOKEN = re.compile(r"\s*(?:(?P<open>\()|(?P<close>\))|(?P<ident>(?:\w|[:+\-.\[\]\\/])+))")
_OPERATORS = ("and", "or", "not")
_GLOB_CHARACTERS = "*?["


class KeywordExpression:
    """A compiled ``-k`` expression; ``matches(words)`` evaluates it against one case's words."""

    def __init__(self, text: str, option: str = "-k") -> None:
        self.text = text
        self.option = option
        self._tokens = self._scan(text)
        self._at = 0
        self._tree = self._or()
        if self._at < len(self._tokens):
            raise self._error("end of input")

    def _scan(self, text: str) -> list[tuple[str, str, int]]:
        """(kind, value, column) of each token: ``open``, ``close``, ``ident`` or an operator word."""
        tokens, at = [], 0
        while text[at:].strip():
            found = _TOKEN.match(text, at)
            if found is None:
                column = at + len(text[at:]) - len(text[at:].lstrip()) + 1
                raise ValueError(f"{self.option} {text!r}: unexpected character {text[column - 1]!r} at column "
                                 f"{column}")
            kind = found.lastgroup
            value = found.group(kind)
            tokens.append((value if kind == "ident" and value in _OPERATORS else kind, value, found.start(kind) + 1))
            at = found.end()
        return tokens

    def _error(self, expected: str) -> ValueError:
        """The ValueError of the next token (or the end) where ``expected`` should be."""
        if self._at < len(self._tokens):
            _, value, column = self._tokens[self._at]
            got = f"{value!r} at column {column}"
        else:
            got = "the end"
        return ValueError(f"{self.option} {self.text!r}: expected {expected}, got {got}")

    def _take(self, kind: str) -> bool:
        """Consume the next token when it is of ``kind``."""
        if self._at < len(self._tokens) and self._tokens[self._at][0] == kind:
            self._at += 1
            return True
        return False

    def _or(self) -> tuple:
        """expr := and_expr ('or' and_expr)*"""
        tree = self._and()
        while self._take("or"):
            tree = ("or", tree, self._and())
        return tree

    def _and(self) -> tuple:
        """and_expr := not_expr ('and' not_expr)*"""
        tree = self._not()
        while self._take("and"):
            tree = ("and", tree, self._not())
        return tree

    def _not(self) -> tuple:
        """not_expr := 'not' not_expr | '(' expr ')' | ident"""
        if self._take("not"):
            return ("not", self._not())
        if self._take("open"):
            tree = self._or()
            if not self._take("close"):
                raise self._error("')'")
            return tree
        if self._take("ident"):
            return ("ident", self._tokens[self._at - 1][1].lower())
        raise self._error("an identifier, 'not' or '('")

    def matches(self, words: Sequence[str]) -> bool:
        """Whether the expression holds for a case with these words (identifiers: substrings, ignoring case)."""
        lowered = [w.lower() for w in words]

        def holds(tree: tuple) -> bool:
            """The value of one node of the expression."""
            op = tree[0]
            if op == "ident":
                return any(tree[1] in w for w in lowered)
            if op == "not":
                return not holds(tree[1])
            if op == "and":
                return holds(tree[1]) and holds(tree[2])
            return holds(tree[1]) or holds(tree[2])

        return holds(self._tree)


def case_words(case: Case, world: int, launcher: str) -> tuple[str, ...]:
    """The words ``-k`` matches for ``case`` at ``world`` under ``launcher`` (the module docstring lists them)."""
    path = Path(case.path)
    return (case.family, case.name, path.name, path.parent.parent.name, f"world={world}", launcher,
            case_id(case.family, case.name, world, launcher))


def is_glob(name: str) -> bool:
    """Whether a ``--scenario`` name is a shell-style pattern."""
    return any(ch in name for ch in _GLOB_CHARACTERS)


def expand_globs(cases: Sequence[Case], names: Sequence[str] | None, option: str = "--scenario") -> list[str] | None:
    """``names`` with each pattern replaced by the keys (``family/name``) of the scenarios it matches."""
    if not names:
        return None
    out: list[str] = []
    for name in names:
        if not is_glob(name):
            out.append(name)
            continue
        hits = [c.key for c in cases if fnmatch.fnmatchcase(c.key if "/" in name else c.name, name)]
        if not hits:
            known = sorted({c.name for c in cases} | {c.key for c in cases})
            raise ValueError(f"{option}: the pattern {name!r} matches no scenario{did_you_mean(name, known)}; "
                             f"`python -m harness list` shows them all")
        out.extend(key for key in hits if key not in out)
    return out


__all__ = ["KeywordExpression", "case_words", "expand_globs", "is_glob"]
