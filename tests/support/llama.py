"""Where the tests find llama-server: the llama.cpp component tree the project's install builds
(``make install`` links it into the venv) or ``$SNAPBUILD_LLAMA_ROOT``."""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from typing import Any

import pytest

from runtimes.engine import RuntimeFailure
from runtimes.llamaserver.supervisor import ServerBinary, find_server


def llama_server() -> ServerBinary | None:
    """The built llama-server, or None when it was not built here."""
    try:
        return find_server()
    except RuntimeFailure:
        return None


needs_llama_server = pytest.mark.skipif(
    llama_server() is None, reason="llama-server is not built here: run `make install`"
)


@contextlib.contextmanager
def captured_llama_log() -> Iterator[list[str]]:
    """Everything llama.cpp logs while active, whatever ``verbose`` says (its buffer sizes are
    what the estimator is checked against); the binding's own logger is put back after."""
    import llama_cpp
    from llama_cpp import _logger

    lines: list[str] = []

    @llama_cpp.llama_log_callback
    def collect(level: int, text: bytes, user_data: Any) -> None:
        lines.append(text.decode("utf-8", "replace"))

    llama_cpp.llama_log_set(collect, ctypes.c_void_p(0))
    try:
        yield lines
    finally:
        llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
