"""Frozen stdlib dataclasses with kebab-case keys: hwprobe's data without pydantic at run time.

``hwprobe --json`` runs in install hooks, and defining the first pydantic model in a process costs
more than the whole probe (about 120 ms of lazy imports, on top of ~70 ms for importing
pydantic). So the profile and the data tables are plain dataclasses: built and serialized here
with a few dictionary operations, and validated strictly by pydantic only where data is *read
in* from outside (``HostProfile.from_json``, fleet inventories, the table tests). Pydantic honours
``__pydantic_config__`` on stdlib dataclasses, which is how :class:`Kebab` gives them the same
rules as the project's pydantic models (unknown keys rejected, kebab-case aliases) without
importing pydantic when a class is defined.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any, ClassVar, Literal, TypeVar, Union

T = TypeVar("T")


def kebab(name: str) -> str:
    """A Python field name as the project writes keys on disk: ``swap_total`` -> ``swap-total``."""
    return name.replace("_", "-")


class Kebab:
    """Mixin for frozen dataclasses: pydantic's rules for them, and plain-data serialization."""

    # A plain dict (not pydantic.ConfigDict) so that defining a dataclass imports nothing.
    # populate_by_name: data written with Python names validates too, as it did with pydantic.
    __pydantic_config__: ClassVar[dict[str, Any]] = {
        "extra": "forbid",
        "alias_generator": kebab,
        "populate_by_name": True,
    }

    def to_data(self) -> dict[str, Any]:
        """JSON-ready data: kebab-case keys in field order, tuples as lists, nested dataclasses."""
        return _object_data(self)


_KEYS: dict[type, tuple[tuple[str, str], ...]] = {}


def _keys(cls: type) -> tuple[tuple[str, str], ...]:
    """(field name, kebab key) of a dataclass, in field order (cached: 100,000-host fleets)."""
    keys = _KEYS.get(cls)
    if keys is None:
        keys = _KEYS[cls] = tuple((f.name, kebab(f.name)) for f in dataclasses.fields(cls))
    return keys


def _object_data(obj: object) -> dict[str, Any]:
    return {key: plain(getattr(obj, name)) for name, key in _keys(type(obj))}


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data (what pydantic's ``model_dump(mode="json", by_alias=True)``
    gave for the types these dataclasses use: str, int, float, bool, None, tuples, dicts)."""
    if isinstance(value, str | int | float | None):
        return value
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value):
        return _object_data(value)
    raise TypeError(f"cannot serialize {type(value).__name__}")


# -- building from trusted data -------------------------------------------------------------------
Convert = Callable[[Any], Any]


def build(cls: type[T], data: dict[str, Any]) -> T:
    """A ``cls`` from kebab-case data, converted by the field types but *not* validated.

    For data the package ships and a test validates (the YAML tables): conversion only turns
    lists into tuples and nested mappings into dataclasses, as pydantic did, at a fraction of the
    start-up cost. Unknown keys raise TypeError.
    """
    return _builder(cls)(data)  # type: ignore[no-any-return]


_BUILDERS: dict[type, Convert] = {}


def _builder(cls: type) -> Convert:
    found = _BUILDERS.get(cls)
    if found is None:
        found = _BUILDERS[cls] = _make_builder(cls)
    return found


def _make_builder(cls: type) -> Convert:
    hints = typing.get_type_hints(cls)
    fields = [(f.name, kebab(f.name), _converter(hints[f.name])) for f in dataclasses.fields(cls)]

    def convert(data: dict[str, Any]) -> Any:
        kwargs = {}
        for name, key, conv in fields:
            if key in data:
                kwargs[name] = conv(data[key])
        unknown = set(data) - {key for _, key, _ in fields}
        if unknown:
            raise TypeError(f"{cls.__name__}: unknown keys {sorted(unknown)}")
        return cls(**kwargs)

    return convert


def _same(value: Any) -> Any:
    return value


def _converter(hint: Any) -> Convert:
    """How to turn parsed YAML/JSON into a value of type ``hint`` (no checks)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _builder(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        inner = _converter(options[0]) if len(options) == 1 else _same
        return _same if inner is _same else (lambda v: None if v is None else inner(v))
    if origin is tuple:
        item = _converter(args[0]) if args else _same
        return lambda v: tuple(item(x) for x in v)
    if origin is dict:
        value = _converter(args[1])
        return _same if value is _same else (lambda v: {k: value(x) for k, x in v.items()})
    if origin is Literal:
        return _same
    return _same
