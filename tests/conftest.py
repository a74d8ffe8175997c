"""Shared pytest configuration. Area helpers live in tests/support/<area>.py (import as
``support.<area>``); keep fixtures that only one area uses in that area's test files."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent
DATA = TESTS / "data"
MACHINES = DATA / "machines"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """tests/data."""
    return DATA


@pytest.fixture(scope="session")
def machines_dir() -> Path:
    """The recorded real machines (copied from ../shared/machines)."""
    return MACHINES
