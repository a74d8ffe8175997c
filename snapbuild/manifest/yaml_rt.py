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
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.composer import Composer, ComposerError
from ruamel.yaml.constructor import ConstructorError, RoundTripConstructor
from ruamel.yaml.error import YAMLError
from ruamel.yaml.nodes import MappingNode, Node, SequenceNode
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.scalarbool import ScalarBoolean

Loc = tuple[str | int, ...]

__all__ = [
    "Document",
    "LIMITS",
    "Loc",
    "YAMLError",
    "YamlLimitError",
    "YamlLimits",
    "dump",
    "layout",
    "field_name",
    "line_of",
    "load",
    "plain",
]


@dataclass(frozen=True)
class YamlLimits:
    """How far a document may nest, and how much its aliases may repeat.

    Anchors and aliases are legitimate (Ansible inventories share variables with ``<<: *x``),
    but nine nested aliases of ten make a 2.7 KB file a billion nodes ("billion laughs"): every
    consumer of the tree (plain data, pydantic, the line finder) walks each repetition. So the
    nodes aliases add may be at most as many as the file writes out, or ``alias_floor``.
    """

    depth: int = 64  # manifests nest 6 levels, inventories about 10
    alias_floor: int = 10_000


LIMITS = YamlLimits()


class YamlLimitError(ComposerError):
    """A document past :data:`LIMITS`; ``problem_mark`` says where."""


def _expanded(root: Node) -> tuple[int, int]:
    """(nodes written, nodes once every alias is expanded): each distinct node counted once
    for the first, every reference for the second (memoized, so linear in the file)."""
    sizes: dict[int, int] = {}

    def size(node: Node) -> int:
        if id(node) not in sizes:
            sizes[id(node)] = 1 + sum(size(child) for child in _node_children(node))
        return sizes[id(node)]

    return len(_distinct(root)), size(root)


def _node_children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value) if isinstance(node, SequenceNode) else []


def _distinct(root: Node) -> dict[int, Node]:
    seen: dict[int, Node] = {}
    todo = [root]
    while todo:
        node = todo.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            todo.extend(_node_children(node))
    return seen


class _BoundedComposer(Composer):
    """Refuses nesting past :attr:`YamlLimits.depth` while composing (before the composer's own
    recursion could exhaust the stack) and aliases past the expansion limit once composed."""

    nesting = 0

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader)
        self.warn_double_anchors = False  # a Python warning on stderr is no message for people

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.nesting += 1
        try:
            if self.nesting > LIMITS.depth:
                mark = self.parser.peek_event().start_mark
                raise YamlLimitError(None, None, f"nested deeper than {LIMITS.depth} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self.nesting -= 1

    def compose_document(self) -> Any:
        root = super().compose_document()
        if root is not None:
            written, expanded = _expanded(root)
            allowed = max(written, LIMITS.alias_floor)
            if expanded - written > allowed:
                raise YamlLimitError(
                    None,
                    None,
                    f"its aliases expand {written} written nodes to {expanded}; aliases may "
                    f"repeat at most {allowed} nodes",
                    root.start_mark,
                )
        return root


class _KeepFirst(RoundTripConstructor):
    """Keeps the first of two equal keys and notes the second (ruamel raises on the first one
    by default, which would hide every other problem of the file)."""

    duplicates: list[tuple[Any, str, int]]

    def check_mapping_key(
        self, node: Any, key_node: Any, mapping: Any, key: Any, value: Any
    ) -> bool:
        if isinstance(key_node, MappingNode | SequenceNode):  # `? [a, b]: x`: no file of ours
            raise ConstructorError(
                None,
                None,
                "a key must be plain text or a number, not a list or a mapping",
                key_node.start_mark,
            )
        if key in mapping:
            self.duplicates.append((mapping, str(key), int(key_node.start_mark.line) + 1))
            return False
        return True


_BOOL = "tag:yaml.org,2002:bool"
# PyYAML's YAML 1.1 booleans: ruamel's 1.1 rules also read y/Y/n/N as booleans, PyYAML does not.
_PYYAML_BOOL = re.compile(
    "^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$"
)


class _PyYamlResolver(VersionedResolver):
    """Resolves plain scalars as PyYAML does, so that a key or host named ``n`` stays text."""

    @property
    def versioned_resolver(self) -> Any:
        table = super().versioned_resolver
        for first, rules in table.items():
            table[first] = [(tag, _PYYAML_BOOL if tag == _BOOL else rx) for tag, rx in rules]
        return table


@dataclass
class Document:
    """A loaded YAML document: the round-trip tree (positions, comments) and the text it came
    from, with the keys that appeared twice (where, and the line of the second one)."""

    tree: Any
    text: str
    duplicates: list[tuple[Loc, int]] = field(default_factory=list)


def _yaml(mapping: int = 2, offset: int = 2) -> YAML:
    yaml = YAML(typ="rt")
    yaml.Composer = _BoundedComposer
    yaml.Constructor = _KeepFirst
    yaml.Resolver = _PyYamlResolver
    yaml.version = (1, 1)  # yes/no/on/off are booleans, as PyYAML (and snapcraft) read them
    yaml.preserve_quotes = True
    yaml.width = 1 << 16  # never fold a long line
    yaml.indent(mapping=mapping, sequence=offset + 2, offset=offset)
    return yaml


def load(text: str) -> Document:
    """Parse ``text``; raise ``YAMLError`` (``problem_mark`` says where) when it is not YAML."""
    yaml = _yaml()
    constructor = yaml.constructor
    assert isinstance(constructor, _KeepFirst)
    constructor.duplicates = []
    tree = yaml.load(text.replace("\r\n", "\n"))  # ruamel would keep "\r" in comments
    duplicates = [
        (_path_of(tree, mapping) + (key,), line) for mapping, key, line in constructor.duplicates
    ]
    return Document(tree, text, duplicates)


_DIRECTIVE = "%YAML 1.1\n---\n"  # what a 1.1 dumper writes first; the files never had it

# (mapping indent, sequence dash offset): "key:\n  sub:" and "key:\n  - item" first
_LAYOUTS = [(m, o) for m in (2, 4, 3) for o in (2, 0, 4)]


def _dumped(tree: Any, layout: tuple[int, int], crlf: bool) -> str:
    stream = io.StringIO()
    _yaml(*layout).dump(tree, stream)
    text = stream.getvalue().removeprefix(_DIRECTIVE)
    return text.replace("\n", "\r\n") if crlf else text


def layout(document: Document) -> tuple[int, int] | None:
    """The indentation that dumps the document back to its exact text, or None when ruamel
    cannot reproduce it (then an edit would reformat the file). Call before editing."""
    crlf = "\r\n" in document.text
    return next(
        (lay for lay in _LAYOUTS if _dumped(document.tree, lay, crlf) == document.text), None
    )


def dump(document: Document, lay: tuple[int, int]) -> str:
    """The (edited) document as text, in ``lay`` (from :func:`layout`) and the text's line
    endings."""
    return _dumped(document.tree, lay, "\r\n" in document.text)


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
