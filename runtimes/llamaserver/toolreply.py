"""Reading an emulated tool reply as it is generated (:mod:`runtimes.llamaserver.toolcalls`).

The model's reply is constrained to one JSON document, ``{"tool_calls": [{"name", "arguments"},
...]}`` or ``{"response": VALUE}``. A client must never see that wrapper: it gets OpenAI's tool
calls, or the response as content. :class:`ReplyReader` reads the document a piece at a time, so
a stream can send the response text as it comes and each call as soon as it is complete; a reply
cut by ``max_tokens`` leaves the complete calls made so far, or the text so far, never half a
call and never the wrapper. A small model sometimes writes its call as the response's text
(``{"response": "{\"tool_calls\": ...}"}``): a response text that starts with ``{`` is held
back until it ends, then read again as a reply, so that call is a call, not text.

The reader is a generator that takes one character at a time (:meth:`ReplyReader._document`),
written as the grammar reads: the key, then a string, a raw JSON value or a list of calls.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

Reading = Generator[None, str, str]  # takes characters; returns the first one it did not use
WHITESPACE = " \t\r\n"
SCALAR_END = ",}] \t\r\n"


@dataclass
class Call:
    """One tool call read from the reply."""

    index: int
    id: str
    name: str = ""
    arguments: str = ""
    cuts: list[int] = field(default_factory=list)  # where the pieces of arguments arrived

    def fragments(self) -> list[str]:
        """The arguments in the pieces they were generated in."""
        ends = [c for c in self.cuts if 0 < c < len(self.arguments)] + [len(self.arguments)]
        starts = [0, *ends[:-1]]
        return [self.arguments[a:b] for a, b in zip(starts, ends, strict=True) if b > a]


@dataclass
class Piece:
    """What one feed of the reply adds: response text, and the calls completed by it."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)


class ReplyReader:
    """The wrapper's content, read incrementally: :meth:`feed` returns what the new text
    completes; :attr:`calls` are the complete calls, :attr:`text` the response so far."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.text = ""
        self.structured = True  # False: the reply is not the wrapper (then it is all text)
        self._seen = ""
        self._held: str | None = None  # response text that may be the wrapper again
        self._piece = Piece()
        self._current: Call | None = None
        self._reader = self._document()
        next(self._reader)

    def feed(self, text: str) -> Piece:
        """Read ``text``; what it added (text to send, calls completed)."""
        self._piece = Piece()
        for char in text:
            self._seen += char
            try:
                self._reader.send(char)
            except StopIteration:
                self._reader = _ignore()
                next(self._reader)
            except ValueError:  # not JSON (a grammar would not allow it): not the wrapper
                self.structured = False
                self._reader = _ignore()
                next(self._reader)
        if self._current is not None:
            self._current.cuts.append(len(self._current.arguments))
        return self._piece

    def finish(self) -> Piece:
        """The reply has ended (or was cut): what the text held back adds."""
        self._piece = Piece()
        self._release()
        return self._piece

    @property
    def started_calls(self) -> bool:
        """Whether the reply chose tool calls (even if none is complete yet)."""
        return self._current is not None or bool(self.calls)

    def _text(self, text: str) -> None:
        self.text += text
        self._piece.text += text

    def _response(self, text: str) -> None:
        """Response text: sent as it comes, unless it opens with ``{`` (see :meth:`_release`)."""
        if self._held is None and self.text:
            self._text(text)
            return
        self._held = (self._held or "") + text
        opening = self._held.lstrip()
        if opening and not opening.startswith("{"):
            self._release()

    def _release(self) -> None:
        """The held text, read as a reply of its own when it is one (its calls become calls),
        else sent as text."""
        held, self._held = self._held, None
        if not held:
            return
        nested = ReplyReader()
        nested.feed(held)
        nested.finish()
        if not (nested.structured and held.lstrip().startswith("{")):
            self._text(held)
            return
        self._text(nested.text)
        for call in nested.calls:
            call.index = len(self.calls)
            self.calls.append(call)
            self._piece.calls.append(call)

    def _document(self) -> Generator[None, str, None]:
        char = yield
        char = yield from _skip(char, WHITESPACE)
        if char != "{":
            yield from self._not_the_wrapper()
            return
        char = yield
        char = yield from _skip(char, WHITESPACE)
        key, char = yield from _string(char, None)
        char = yield from _after_colon(char)
        if key == "response" and char == '"':
            yield from _string(char, self._response)
            self._release()
        elif key == "response":
            yield from _raw(char, self._text)
        elif key == "tool_calls" and char == "[":
            yield from self._calls()
        else:
            yield from self._not_the_wrapper()

    def _not_the_wrapper(self) -> Generator[None, str, None]:
        """What was read is not the wrapper (no grammar applied): it is the model's text."""
        self.structured = False
        self._text(self._seen)
        while True:
            self._text((yield))

    def _calls(self) -> Generator[None, str, None]:
        char = yield
        while True:
            char = yield from _skip(char, WHITESPACE + ",")
            if char != "{":
                return
            self._current = Call(len(self.calls), "call_" + uuid.uuid4().hex[:24])
            char = yield from self._call()
            self.calls.append(self._current)
            self._piece.calls.append(self._current)
            self._current = None

    def _call(self) -> Reading:
        """One ``{"name": ..., "arguments": ...}`` object; returns the character after it."""
        assert self._current is not None
        call = self._current
        char = yield
        while True:
            char = yield from _skip(char, WHITESPACE + ",")
            if char == "}":
                return (yield)
            key, char = yield from _string(char, None)
            char = yield from _after_colon(char)
            if key == "name":
                call.name, char = yield from _string(char, None)
            elif key == "arguments":
                char = yield from _raw(char, self._argument)
            else:
                char = yield from _raw(char, _discard)

    def _argument(self, text: str) -> None:
        assert self._current is not None
        self._current.arguments += text


def _discard(text: str) -> None:
    """Where a value nobody reads goes."""


def _ignore() -> Generator[None, str, None]:
    while True:
        yield


def _skip(char: str, chars: str) -> Reading:
    while char in chars:
        char = yield
    return char


def _after_colon(char: str) -> Reading:
    char = yield from _skip(char, WHITESPACE)
    if char != ":":
        raise ValueError("expected ':'")
    char = yield
    return (yield from _skip(char, WHITESPACE))


def _string(char: str, emit: Callable[[str], None] | None) -> Generator[None, str, tuple[str, str]]:
    """A JSON string starting at ``char`` (its quote), decoded; ``emit`` gets it piece by piece
    (escapes whole, a surrogate pair together). Returns (the string, the next character)."""
    if char != '"':
        raise ValueError("expected a string")
    decoded: list[str] = []
    pending = ""  # an escape sequence being read, or a high surrogate waiting for its pair
    while True:
        char = yield
        if pending or char == "\\":
            pending += char
            text = _escape(pending)
            if text is None:
                continue
            pending, char = "", text
        elif char == '"':
            return "".join(decoded), (yield)
        decoded.append(char)
        if emit is not None:
            emit(char)


def _escape(sequence: str) -> str | None:
    """The text of a complete escape sequence (None while it is incomplete)."""
    if len(sequence) < 2 or sequence[1] == "u" and len(sequence) < 6:
        return None
    if sequence[1] == "u" and 0xD800 <= int(sequence[2:6], 16) < 0xDC00 and len(sequence) < 12:
        return None  # a high surrogate: wait for the low one
    text: str = json.loads(f'"{sequence}"')
    return text


def _raw(char: str, emit: Callable[[str], None]) -> Reading:
    """A JSON value of any kind starting at ``char``, passed on as written; returns the
    character after it."""
    depth, quoted, escaped = 0, False, False
    while True:
        if not quoted and depth == 0 and char in SCALAR_END:
            return char  # a number, true, false or null has ended
        emit(char)
        if quoted:
            quoted = escaped or char != '"'
            escaped = not escaped and char == "\\"
        elif char == '"':
            quoted = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return (yield)
        char = yield
