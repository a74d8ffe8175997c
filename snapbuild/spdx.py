"""Does snapd accept a manifest's ``license:``? Checked at ``validate`` time, not at ``snap pack``.

snapd refuses a snap whose ``license`` is not an SPDX expression it knows, and it says so only
when the snap is packed or installed, far from the manifest line that caused it. The accepted ids
are data (``snapbuild/data/snapd_licenses.yaml``: the SPDX list snapd embeds, plus
``Proprietary``); the grammar is the small one snapd implements: ids joined by ``AND``/``OR``,
parentheses, an id may end in ``+``, and ``WITH`` names an exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

DATA = Path(__file__).with_name("data") / "snapd_licenses.yaml"
_TOKEN = re.compile(r"\(|\)|[^\s()]+")
OPERATORS = ("AND", "OR", "WITH")


@dataclass(frozen=True)
class LicenseTable:
    """The ids and exceptions snapd accepts (case-sensitive)."""

    licenses: frozenset[str]
    exceptions: frozenset[str]
    list_version: str


@cache
def license_table() -> LicenseTable:
    """The table from ``snapd_licenses.yaml`` (read once)."""
    data = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    ids = [str(i) for i in data["licenses"]] + [str(i) for i in data.get("extra-ids", [])]
    return LicenseTable(
        frozenset(ids),
        frozenset(str(e) for e in data["exceptions"]),
        str(data["spdx-list-version"]),
    )


def license_problem(expression: str) -> str | None:
    """Why snapd would refuse ``expression``, or None when it accepts it."""
    table = license_table()
    tokens = _TOKEN.findall(expression)
    if not tokens:
        return "the licence is empty"
    depth = 0
    last = ""
    for tok in tokens:
        if tok == "(":
            if last == "WITH":
                return "'(' cannot follow WITH"
            depth += 1
            last = ""
            continue
        if tok == ")":
            if depth == 0:
                return "unbalanced ')'"
            if last in ("", *OPERATORS):
                return "empty or unfinished expression before ')'"
            depth -= 1
        elif tok in OPERATORS:
            if last in ("", "AND", "OR", "WITH"):
                return f"{tok} needs a licence before it"
        elif last == "WITH":
            if tok not in table.exceptions:
                return f"unknown licence exception {tok!r}"
        elif last in ("", "AND", "OR"):
            if tok.removesuffix("+") not in table.licenses:
                return f"{tok!r} is not an SPDX licence id snapd knows" + _hint(tok)
        else:
            return f"missing AND or OR before {tok!r}"
        last = tok
    if depth:
        return "unbalanced '('"
    if last in OPERATORS:
        return f"the expression ends with {last}"
    return None


def _hint(token: str) -> str:
    known = spdx_id(token)
    return f" (did you mean {known!r}?)" if known else ""


def spdx_id(text: str) -> str | None:
    """The accepted id spelled like ``text`` ignoring case (``apache-2.0`` -> ``Apache-2.0``)."""
    folded = text.strip().casefold()
    return next((i for i in license_table().licenses if i.casefold() == folded), None)
