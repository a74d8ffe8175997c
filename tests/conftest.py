"""Shared pytest configuration. Area helpers live in tests/support/<area>.py (import as
``support.<area>``); keep fixtures that only one area uses in that area's test files."""

from __future__ import annotations

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
