"""Editing a hand-written manifest in place: new values, same comments, same layout.

``fetch --record`` writes a downloaded file's size and sha256 into the manifest a person wrote
and commented. The edit goes through ruamel.yaml's round-trip tree
(:mod:`snapbuild.manifest.yaml_rt`)
rather than through text offsets: the tree knows which ``sha256:`` belongs to which file entry,
and it dumps everything it was not asked to change as it was. Before any edit the untouched tree
must dump back to the exact text; a file it cannot reproduce is refused, never reformatted.
"""

from __future__ import annotations

from typing import Any

import yaml
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import CommentMark
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, ScalarString
from ruamel.yaml.tokens import CommentToken

from snapbuild.manifest import yaml_rt
from snapcommon.errors import ManifestError

_EOL = 2  # ruamel's slot for the comment after a key's value (and the comment lines below it)


def record_in_text(text: str, artifact: str, path: str, *, sha256: str, size: int) -> str:
    """``text`` (a manifest) with the file entry ``artifact``/``path`` given ``sha256`` and
    ``size`` and its ``placeholder:`` key removed; comments, quoting, indentation and line
    endings stay as they were."""
    document = yaml_rt.load(text)
    lay = yaml_rt.layout(document)
    if lay is None:
        raise ManifestError(
            "cannot record into this manifest without changing its layout",
            details=f"{artifact}/{path}: size {size}, sha256 {sha256}",
            resolution="write these values into the file entry by hand, "
            "and remove its `placeholder: true`",
        )
    entry = _file_entry(document.tree, artifact, path)
    if entry is None:
        raise ManifestError(
            f"the manifest has no file {path!r} in artifact {artifact!r} any more",
            resolution="it changed while downloading: run the command again",
        )
    entry["sha256"] = _like(entry.get("sha256"), sha256)
    entry["size"] = _like(entry.get("size"), size)
    _drop_placeholder(entry)
    return yaml_rt.dump(document, lay)


def _item(seq: Any, key: str, value: str) -> CommentedMap | None:
    """The mapping in the sequence ``seq`` whose ``key`` is ``value``."""
    if not isinstance(seq, CommentedSeq):
        return None
    return next(
        (m for m in seq if isinstance(m, CommentedMap) and m.get(key) == value),
        None,
    )


def _file_entry(tree: Any, artifact: str, path: str) -> CommentedMap | None:
    if not isinstance(tree, CommentedMap):
        return None
    art = _item(tree.get("artifacts"), "name", artifact)
    return _item(art.get("files"), "path", path) if art is not None else None


def _like(old: Any, new: str | int) -> Any:
    """``new`` written the way ``old`` was: in the same quotes; a plain string that YAML would
    read as a number (a hash of digits only) gets double quotes."""
    if isinstance(old, ScalarString):
        return type(old)(str(new))
    if isinstance(new, str) and not isinstance(yaml.safe_load(new), str):
        return DoubleQuotedScalarString(new)
    return new


def _drop_placeholder(entry: CommentedMap) -> None:
    """Remove ``placeholder:`` with its own end-of-line comment; the comment lines below it
    move to the key before it. Where the key shares its line with others (a flow mapping, or
    the first key after the item's ``-``), it is set to ``false`` instead."""
    keys = list(entry)
    index = keys.index("placeholder")
    if entry.fa.flow_style() or index == 0:
        entry["placeholder"] = False
        return
    below = _comment_lines_below(entry, "placeholder")
    previous = keys[index - 1]
    if below and isinstance(entry[previous], CommentedMap | CommentedSeq):
        entry["placeholder"] = False  # the lines would land inside the nested value
        return
    del entry["placeholder"]
    if below:
        _append_below(entry, previous, below)


def _comment_lines_below(entry: CommentedMap, key: str) -> str:
    """The full comment lines between ``key``'s line and the next key (ruamel keeps them in the
    same token as the key's end-of-line comment)."""
    slots = entry.ca.items.get(key)
    token = slots[_EOL] if slots and len(slots) > _EOL else None
    if not isinstance(token, CommentToken):
        return ""
    return str(token.value).partition("\n")[2]


def _append_below(entry: CommentedMap, key: str, lines: str) -> None:
    slots = entry.ca.items.setdefault(key, [None, None, None, None])
    token = slots[_EOL]
    if isinstance(token, CommentToken):
        token.value = str(token.value) + lines
    else:
        slots[_EOL] = CommentToken("\n" + lines, CommentMark(0))
