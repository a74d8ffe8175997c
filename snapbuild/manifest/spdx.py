"""Does snapd accept a manifest's ``license:``? Checked at ``validate`` time, not at ``snap pack``.

snapd refuses a snap whose ``license`` is not an SPDX expression it knows, and it says so only
when the snap is packed or installed, far from the manifest line that caused it. The accepted ids
are data (``snapbuild/data/snapd_licenses.yaml``: the SPDX list snapd embeds, plus
``Proprietary``); the grammar is the small one snapd implements: ids joined by ``AND``/``OR``,
parentheses, an id may end in ``+``, and ``WITH`` names an exception.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from typing import Literal

from pydantic import model_validator

from snapbuild.estimate.tables import read_data
from snapcommon.model import KebabModel

_TOKEN = re.compile(r"\(|\)|[^\s()]+")
OPERATORS = ("AND", "OR", "WITH")


class LicenseFile(KebabModel):
    """The whole of ``snapd_licenses.yaml``: the ids and exceptions snapd accepts."""

    schema_version: Literal[1]
    spdx_list_version: str
    extra_ids: tuple[str, ...] = ()  # accepted, not SPDX (Proprietary)
    licenses: tuple[str, ...]
    exceptions: tuple[str, ...]

    @model_validator(mode="after")
    def _tokens(self) -> LicenseFile:
        """Every entry is one token of the grammar, and no id is listed twice, even in another
        case (:func:`spdx_id` corrects a spelling by case, so that must be unambiguous)."""
        entries = (*self.extra_ids, *self.licenses, *self.exceptions)
        bad = [e for e in entries if _TOKEN.fullmatch(e) is None or e in ("(", ")", *OPERATORS)]
        if bad:
            raise ValueError(f"not a licence id: {', '.join(map(repr, bad))}")
        folded = Counter(e.casefold() for e in entries)
        twice = sorted(e for e in entries if folded[e.casefold()] > 1)
        if twice:
            raise ValueError(f"listed twice (ignoring case): {', '.join(twice)}")
        return self


class LicenseTable(KebabModel):
    """What the check looks ids up in (case-sensitive, as snapd does)."""

    licenses: frozenset[str]  # the SPDX ids and the extra ids
    exceptions: frozenset[str]
    list_version: str


@cache
def license_table() -> LicenseTable:
    """``snapbuild/data/snapd_licenses.yaml``, validated once per process."""
    data = LicenseFile.model_validate(read_data("snapd_licenses.yaml"))
    return LicenseTable(
        licenses=frozenset((*data.licenses, *data.extra_ids)),
        exceptions=frozenset(data.exceptions),
        list_version=data.spdx_list_version,
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
