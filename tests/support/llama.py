"""Where the tests find llama-server: the llama.cpp component tree the project's install builds
(``make install``), named by ``$SNAPBUILD_LLAMA_ROOT``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtimes.llamaserver import ROOT_VAR, ServerBinary, locate


def llama_server() -> ServerBinary | None:
    """The built llama-server, or None when it was not built here."""
    root = os.environ.get(ROOT_VAR)
    if not root:
        return None
    try:
        return locate(Path(root))
    except Exception:
        return None


needs_llama_server = pytest.mark.skipif(
    llama_server() is None,
    reason=f"llama-server is not built: run `make install` and set {ROOT_VAR} to its tree",
)
