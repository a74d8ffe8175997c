"""Where the tests find llama-server: the llama.cpp component tree the project's install builds
(``make install`` links it into the venv) or ``$SNAPBUILD_LLAMA_ROOT``."""

from __future__ import annotations

import pytest

from runtimes.base import RuntimeFailure
from runtimes.llamaserver import ServerBinary, find_server


def llama_server() -> ServerBinary | None:
    """The built llama-server, or None when it was not built here."""
    try:
        return find_server()
    except RuntimeFailure:
        return None


needs_llama_server = pytest.mark.skipif(
    llama_server() is None, reason="llama-server is not built here: run `make install`"
)
