"""Hostile manifests: no manifest string can add, change or remove a key in the output.

Each field that reaches a rendered file gets strings holding a newline, a colon, ``{{``,
quotes, a document marker and a comment sign. Every YAML file of the project must parse to the
same key structure as for a benign manifest, and the hostile value must come back unchanged
wherever it is written.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from support.build import CASES

from snapbuild.manifest.model import Manifest
from snapbuild.project.builder import build_project

HOSTILE = [
    "evil\nname: pwned",
    "a: b",
    "{{ project }} {% raw %}",
    "'single' \"double\"",
    "---\nx: 1",
    "# comment",
    "- item",
    "value\n...\n---\nname: other",
    "trailing space \n",
]

BASE: dict[str, Any] = yaml.safe_load((CASES / "tiny-cpu-cuda" / "manifest.yaml").read_text())

# field path in the manifest -> where the same string must appear in snapcraft.yaml (or None:
# it only reaches the manifest copy in snapbuild-data)
FIELDS: dict[tuple[Any, ...], tuple[Any, ...] | None] = {
    ("title",): ("title",),
    ("summary",): ("summary",),
    ("description",): ("description",),
    ("license",): None,  # not SPDX: left out of snapcraft.yaml, checked below
    ("version",): ("version",),
    ("engines", 0, "summary"): None,
    ("model", "architecture"): None,
    ("artifacts", 0, "quantization"): None,
    ("artifacts", 0, "files", 0, "url"): ("parts", "artifact-tiny-q4-1", "source"),
    ("artifacts", 0, "files", 0, "path"): None,  # checked below: an organize destination
}


def _set(data: dict[str, Any], path: tuple[Any, ...], value: str) -> dict[str, Any]:
    out = copy.deepcopy(data)
    node: Any = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


def _shape(data: Any) -> Any:
    """The key structure of parsed YAML, with scalar values blanked."""
    if isinstance(data, dict):
        return {k: _shape(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_shape(v) for v in data]
    return type(data).__name__


def _parsed(files: dict[str, str]) -> dict[str, Any]:
    return {rel: yaml.safe_load(text) for rel, text in files.items() if rel.endswith(".yaml")}


def _value(field: tuple[Any, ...], hostile: str) -> str:
    if field[-1] == "url":
        return "https://example.com/models/tiny-Q4_1.gguf?x=" + hostile  # path stays plain
    if field == ("summary",) or field == ("version",):
        return hostile[:32]
    return hostile


def _manifest(data: dict[str, Any]) -> Manifest:
    """The model alone, without the loader's catalog checks: the builder must be safe even for
    values the loader would refuse (an unknown quantization, say)."""
    return Manifest.model_validate(data)


BENIGN = build_project(_manifest(BASE), source="src")


@pytest.mark.parametrize("field", list(FIELDS), ids=lambda f: ".".join(map(str, f)))
@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_value_cannot_change_keys(field: tuple[Any, ...], hostile: str) -> None:
    value = _value(field, hostile)
    if field[-1] == "path":
        with pytest.raises(ValidationError, match="path must be a relative path of names"):
            _manifest(_set(BASE, field, value))
        return  # the one file-name rule refuses what YAML or a shell would misread
    manifest = _manifest(_set(BASE, field, value))
    built = build_project(manifest, source="src")
    parsed, benign = _parsed(built.files), _parsed(BENIGN.files)
    if field == ("license",):  # no hostile text is an SPDX expression: the key is left out
        benign["snap/snapcraft.yaml"].pop("license")
    assert {rel: _shape(d) for rel, d in parsed.items()} == {
        rel: _shape(d) for rel, d in benign.items()
    }
    assert parsed["snap/snapcraft.yaml"] == built.project
    target = FIELDS[field]
    if target is not None:
        assert _get(parsed["snap/snapcraft.yaml"], target) == value
    if field[-1] == "path":
        organize = parsed["snap/snapcraft.yaml"]["parts"]["artifact-tiny-q4-1"]["organize"]
        assert organize == {"tiny-Q4_1.gguf": f"(component/tiny-q4)/{value}"}
    # the manifest copy reads back to the same manifest
    copy_text = built.files["snapbuild-data/manifest.yaml"]
    assert _manifest(yaml.safe_load(copy_text)) == manifest
    if field == ("license",):
        assert "license" not in built.project
        assert f"Licence: {value}" in built.files["snapbuild-doc/copyright"]
    # hooks never carry manifest text
    assert built.files["snap/hooks/install"] == BENIGN.files["snap/hooks/install"]


def test_title_reaches_component_summaries_as_one_short_line() -> None:
    manifest = _manifest(_set(BASE, ("title",), "T\n" * 60 + ": x"))
    built = build_project(manifest, source="src")
    summary = yaml.safe_load(built.files["snap/snapcraft.yaml"])["components"]["tiny-q4"]["summary"]
    assert "\n" not in summary and len(summary) <= 78
    assert summary.startswith("gguf Q4_1 weights of T T T") and summary.endswith("...")
