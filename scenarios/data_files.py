"""Reading data files (scenario YAML, bundle and world manifests) so that no file can exhaust the machine.

Every YAML file the harness reads goes through ``read_text`` and
``load_yaml``; each refusal is a ``ScenarioError`` (or the ``error`` class a
caller passes, e.g. ``BundleError``) whose message starts with the file and
says which limit it broke:

- the path is ``stat``-ed before it is opened and must be a regular file: a
  FIFO would block the reader forever, a device (``/dev/zero`` behind a
  symlink) never ends, a symlink loop never resolves; the open itself is
  ``O_NONBLOCK`` so that a file swapped for a FIFO after the ``stat`` cannot
  block either, and the opened descriptor is checked again;
- at most ``cap + 1`` bytes are read (``MAX_SCENARIO_BYTES`` for scenario
  files, ``MAX_MANIFEST_BYTES`` for manifests): a longer file is refused;
- the bytes must be UTF-8; the message gives the offset of the first bad byte;
- ``DataLoader`` (a ``yaml.SafeLoader``: plain data only, never Python
  objects) refuses nesting deeper than ``MAX_DEPTH`` (``[`` ten thousand
  times would exhaust the composer's recursion), a mapping that gives one
  key twice (YAML would keep the last silently: a second ``expect:`` would
  change what a scenario expects) with the key and its line, and aliases
  whose expansion adds more than ``MAX_ALIAS_NODES`` nodes in all (an
  800-byte "billion laughs" file expands to 10^9 nodes). Nothing in this
  repository writes anchors; the bound leaves room for a hand-written file
  that shares a small block.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from scenarios.fields import ScenarioError

MAX_SCENARIO_BYTES = 256 * 1024
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 64
MAX_ALIAS_NODES = 10_000

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def _kind(mode: int) -> str:
    """What a non-regular file of ``mode`` is, in words."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def require_regular(path: str | os.PathLike, shown: str, error: type[ScenarioError] = ScenarioError) -> int:
    """The size of ``path`` when it is a regular file (symlinks followed), else ``error`` naming ``shown``."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise error(f"{shown}: cannot read: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{shown}: cannot read: {_kind(st.st_mode)}, expected a regular file")
    return st.st_size


def read_text(path: str | os.PathLike, shown: str, cap: int, error: type[ScenarioError] = ScenarioError) -> str:
    """The UTF-8 text of the regular file ``path`` of at most ``cap`` bytes; anything else is ``error`` naming ``shown``."""
    require_regular(path, shown, error)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise error(f"{shown}: cannot read: {exc.strerror or exc}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(f"{shown}: cannot read: {_kind(mode)}, expected a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(cap + 1)
    except OSError as exc:
        raise error(f"{shown}: cannot read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if len(data) > cap:
        raise error(f"{shown}: file larger than the limit of {cap} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{shown}: not UTF-8 text (byte {exc.start}: {data[exc.start:exc.start + 1]!r})") from exc


class DataLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses deep nesting, duplicate keys and aliases expanding past a bound."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        """Compose one node, refusing nesting deeper than ``MAX_DEPTH``."""
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nesting deeper than {MAX_DEPTH} levels",
                                                  self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        """Compose a document and refuse it when its aliases expand past ``MAX_ALIAS_NODES`` nodes."""
        node = super().compose_document()
        _check_alias_expansion(node)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        """A mapping; a key given twice is an error naming the key and both lines."""
        if isinstance(node, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first_line.get(key)
                except TypeError:  # an unhashable key: the base class names it
                    break
                if seen is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {_short(key)} (first given on line {seen + 1})",
                        key_node.start_mark)
                first_line[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _short(value: Any) -> str:
    """``repr(value)`` of a scalar key, cut to 60 characters."""
    text = repr(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def _check_alias_expansion(root: Any) -> None:
    """Refuse a node graph whose alias uses expand to more than ``MAX_ALIAS_NODES`` nodes, or that is cyclic.

    The composer hands an alias the anchored node itself, so the document is
    a graph: its expanded size (each child counted every time it is used)
    less its distinct nodes is what the aliases add.
    """
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    # iterative post-order walk: the graph may be deep or shared; each distinct node is sized once
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if node is None or (not done and id(node) in sizes):
            continue
        if not done:
            if id(node) in on_path:
                raise yaml.composer.ComposerError(None, None, "an alias refers to a node that contains it",
                                                  node.start_mark)
            on_path.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))
            continue
        on_path.discard(id(node))
        sizes[id(node)] = 1 + sum(sizes[id(child)] for child in _children(node))
        if sizes[id(node)] - len(sizes) > MAX_ALIAS_NODES:
            raise yaml.composer.ComposerError(None, None, f"aliases expand to more than {MAX_ALIAS_NODES} nodes",
                                              node.start_mark)


def _children(node: Any) -> list:
    """The child nodes of a YAML node (keys and values of a mapping)."""
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def load_yaml(text: str, shown: str, error: type[ScenarioError] = ScenarioError) -> Any:
    """The plain data of YAML ``text`` read with ``DataLoader``; invalid or refused YAML is ``error`` naming ``shown``."""
    loader = DataLoader(text)
    loader.name = shown  # marks in messages say the file, not "<unicode string>"
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        raise error(f"{shown}: not valid YAML: {exc}") from exc
    except ValueError as exc:  # a scalar the constructor cannot convert, e.g. an int of more than 4300 digits
        raise error(f"{shown}: not valid YAML: {str(exc)[:200]}") from exc
    except RecursionError as exc:
        raise error(f"{shown}: not valid YAML: nested too deeply to read") from exc
    finally:
        loader.dispose()


def read_yaml(path: str | os.PathLike, shown: str, cap: int, error: type[ScenarioError] = ScenarioError) -> Any:
    """``load_yaml`` of ``read_text(path)``: the file's plain data, every limit checked."""
    return load_yaml(read_text(Path(path), shown, cap, error), shown, error)


__all__ = ["DataLoader", "require_regular", "MAX_ALIAS_NODES", "MAX_DEPTH", "MAX_MANIFEST_BYTES", "MAX_SCENARIO_BYTES", "load_yaml",
           "read_text", "read_yaml"]
