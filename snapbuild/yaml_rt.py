"""YAML with positions and round-trip edits, through ruamel.yaml.

Manifests are hand-written, commented files. Two jobs need more than plain data from them: an
error must say on which line a field sits, and ``fetch --record`` must change a few values while
keeping every comment and the author's layout. ruamel.yaml's round-trip mode does both: its
containers carry the line and column of every key and item (``.lc``), and it dumps a loaded
document back as it was written. This module keeps the few settings that make that true for
manifests (YAML 1.1 values, as PyYAML reads them elsewhere; the document's own indentation; no
line wrapping; quotes kept), so the loader and the recorder read YAML the same way.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import RoundTripConstructor
from ruamel.yaml.error import YAMLError
from ruamel.yaml.scalarbool import ScalarBoolean
from ruamel.yaml.util import load_yaml_guess_indent

Loc = tuple[str | int, ...]

__all__ = [
    "Document",
    "Loc",
    "YAMLError",
    "dump",
    "field_name",
    "line_of",
    "load",
    "plain",
]


class _KeepFirst(RoundTripConstructor):
    """Keeps the first of two equal keys and notes the second (ruamel raises on the first one
    by default, which would hide every other problem of the file)."""

    duplicates: list[tuple[Any, str, int]]

    def check_mapping_key(
        self, node: Any, key_node: Any, mapping: Any, key: Any, value: Any
    ) -> bool:
        if key in mapping:
            self.duplicates.append((mapping, str(key), int(key_node.start_mark.line) + 1))
            return False
        return True


@dataclass
class Document:
    """A loaded YAML document: the round-trip tree (positions, comments) and its layout."""

    tree: Any
    indent: int = 2
    sequence_offset: int = 2
    crlf: bool = False
    duplicates: list[tuple[Loc, int]] = field(default_factory=list)  # (where, line of the 2nd)


def _yaml(indent: int = 2, offset: int = 2) -> YAML:
    yaml = YAML(typ="rt")
    yaml.Constructor = _KeepFirst
    yaml.version = (1, 1)  # yes/no/on/off are booleans, as PyYAML (and snapcraft) read them
    yaml.preserve_quotes = True
    yaml.width = 1 << 16  # never fold a long line
    yaml.indent(mapping=indent, sequence=indent + offset, offset=offset)
    return yaml


def load(text: str) -> Document:
    """Parse ``text``; raise ``YAMLError`` (``problem_mark`` says where) when it is not YAML."""
    yaml = _yaml()
    constructor = yaml.constructor
    assert isinstance(constructor, _KeepFirst)
    constructor.duplicates = []
    tree, indent, offset = load_yaml_guess_indent(text, yaml=yaml)
    duplicates = [
        (_path_of(tree, mapping) + (key,), line) for mapping, key, line in constructor.duplicates
    ]
    return Document(tree, indent or 2, 2 if offset is None else offset, "\r\n" in text, duplicates)


def dump(document: Document) -> str:
    """The document as text, laid out as it was read (indentation, quotes, line endings)."""
    stream = io.StringIO()
    _yaml(document.indent, document.sequence_offset).dump(document.tree, stream)
    text = stream.getvalue()
    return text.replace("\n", "\r\n") if document.crlf else text


def _children(node: Any) -> Iterator[tuple[str | int, Any]]:
    if isinstance(node, CommentedMap):
        yield from ((k, v) for k, v in node.items() if isinstance(k, str))
    elif isinstance(node, CommentedSeq):
        yield from enumerate(node)


def _path_of(node: Any, target: Any, here: Loc = ()) -> Loc:
    """Where the container ``target`` sits in the tree (by identity)."""
    if node is target:
        return here
    for part, child in _children(node):
        found = _path_of(child, target, here + (part,))
        if found:
            return found
    return ()


def plain(node: Any) -> Any:
    """The tree as plain ``dict``/``list``/``str``/``int``/``float`` values (what pydantic and
    every dumper expect), without ruamel's comment-carrying subclasses."""
    if isinstance(node, dict):
        return {plain(k): plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    if isinstance(node, ScalarBoolean):  # an anchored boolean: an int subclass in ruamel
        return bool(node)
    for kind in (bool, str, int, float):
        if isinstance(node, kind):
            return kind(node)
    return node


def field_name(loc: Loc) -> str:
    """``("engines", 2, "runtime")`` -> ``engines[2].runtime``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _child_line(node: Any, part: str | int, *, key: bool) -> int | None:
    """The 0-based line of ``part`` in ``node``: its key (``key``) or its value."""
    if isinstance(node, CommentedMap) and isinstance(part, str) and part in node:
        return int((node.lc.key(part) if key else node.lc.value(part))[0])
    if isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
        return int(node.lc.item(part)[0])
    return None


def line_of(tree: Any, loc: Loc) -> int:
    """The 1-based line of the field at ``loc`` (its key when it has one); where the path
    leaves the document, the line where the deepest part of it that exists starts."""
    if not isinstance(tree, CommentedMap | CommentedSeq):
        return 1
    node, line = tree, int(tree.lc.line)
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        found = _child_line(node, part, key=last and isinstance(part, str))
        if found is None:
            break
        line = found
        node = node[part]
        if last:
            break
        if isinstance(node, CommentedMap | CommentedSeq):
            line = int(node.lc.line)
    return line + 1
