"""Request text that cannot be encoded: lone UTF-16 surrogates in a JSON body.

JSON may spell a character as ``\\ud83d``; half of a surrogate pair on its own decodes to a
Python string that no UTF-8 encoder accepts, so the first engine that serialises the request
(orjson, httpx, a tokenizer) fails, and the client got a 500. The body limit looks for such
escapes in the raw bytes (cheap: most bodies have none) and only then parses the body to name the
field, so the client gets a 400 that says where.
"""

from __future__ import annotations

import json
import re
from typing import Any

SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def lone_surrogate(body: bytes) -> str | None:
    """The field (``messages[0].content``) holding a string with a lone surrogate, ``""`` for
    the body itself, None when there is none or the body is not JSON (the route says so)."""
    if not SURROGATE_ESCAPE.search(body):
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return _find(data)


def _find(data: Any) -> str | None:
    todo: list[tuple[str, Any]] = [("", data)]
    while todo:
        path, node = todo.pop()
        if isinstance(node, str) and not _encodes(node):
            return path
        if isinstance(node, dict):
            for key, value in node.items():
                if not _encodes(key):
                    return path or "(a key)"
                todo.append((f"{path}.{key}" if path else key, value))
        elif isinstance(node, list):
            todo.extend((f"{path}[{i}]", value) for i, value in enumerate(node))
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
