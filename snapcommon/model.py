"""``KebabModel``: the pydantic base of the project's documents (manifests, decisions, catalog,
build plans, fleet records...).

It is kept apart from :mod:`snapcommon.plain` because the prober's own data (the host profile and
its tables) are plain dataclasses, so that ``hwprobe --json`` never imports pydantic; the
documents built on this class are read and written by ``snapbuild``, the runtimes and the snap,
where pydantic's validation is the point. Both share one key convention,
:func:`snapcommon.plain.kebab`, and the same rules: frozen, unknown keys rejected.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from snapcommon.plain import kebab


class KebabModel(BaseModel):
    """Base of the project's pydantic models: frozen, strict about keys, kebab-case on disk."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=kebab,
        populate_by_name=True,
    )

    def to_data(self) -> dict[str, object]:
        """Plain JSON-ready data with kebab-case keys."""
        return self.model_dump(mode="json", by_alias=True)


def repeated(values: Iterable[str]) -> list[str]:
    """The values listed more than once, sorted: what a data table's unique-id check names."""
    counts = Counter(values)
    return sorted(v for v, n in counts.items() if n > 1)
