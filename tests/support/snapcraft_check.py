"""Run INSIDE snapcraft 9.0.1's virtualenv: judge rendered projects as snapcraft itself does.

Not imported by the test suite's own Python (snapcraft is not installed there):
``tests/support/snapcraft.py`` runs this file with the oracle venv's interpreter, once for a
whole batch of project directories, because starting snapcraft costs about a second.

For every directory (the directory holding ``snap/snapcraft.yaml``) it does what snapcraft's
commands do, with snapcraft's own code and nothing re-implemented:

- ``builds``: every build of the project's build plan (craft-application's exhaustive plan over
  the ``platforms``), each rendered with snapcraft's ``ProjectService.render_for`` (grammar,
  extensions, ``(component/...)`` partitions, project variables, then the ``Project`` model),
  and the ``meta/snap.yaml`` snapcraft would write for it (``get_metadata_from_project``).
- ``expand``: the body of ``snapcraft expand-extensions`` (``ExpandExtensionsCommand.run``) for
  the host architecture, i.e. ``apply_yaml`` then ``Project.unmarshal``, and its YAML output.

Input: JSON list of directories on stdin. Output: one JSON object on stdout, keyed by directory.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import craft_cli
import craft_parts
import craft_platforms
import yaml
from snapcraft import application, models, services
from snapcraft.meta import snap_yaml
from snapcraft.parts.yaml_utils import apply_yaml, extract_parse_info, process_yaml


def _error(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    details = getattr(exc, "details", None)
    return f"{text}\n{details}" if details else text


def _plain(value: Any) -> Any:
    """snap.yaml data as snapcraft would dump it (aliases, no None values)."""
    return yaml.safe_load(yaml.safe_dump(value))


def _builds(project_dir: Path, prime: Path) -> list[dict[str, Any]]:
    factory = services.SnapcraftServiceFactory(app=application.APP_METADATA)
    factory.update_kwargs("project", project_dir=project_dir)
    project = factory.get("project")
    platforms = project.get_platforms()
    raw = {**project.get_raw(), "platforms": platforms}
    plan = factory.get("build_plan")._gen_exhaustive_build_plan(project_data=raw)
    out: list[dict[str, Any]] = []
    for item in plan:
        entry: dict[str, Any] = {
            "platform": item.platform,
            "build-on": str(item.build_on),
            "build-for": str(item.build_for),
        }
        try:
            model = project.render_for(
                build_for=str(item.build_for), build_on=str(item.build_on), platform=item.platform
            )
            meta = snap_yaml.get_metadata_from_project(model, prime, arch=str(item.build_for))
            entry["snap-yaml"] = _plain(meta.marshal())
            entry["parts"] = sorted(model.parts)
        except Exception as exc:  # noqa: BLE001 - every rejection is a result to report
            entry["error"] = _error(exc)
        out.append(entry)
    if not out:
        out.append({"platform": None, "error": "the build plan is empty"})
    return out


def _expand(project_dir: Path) -> dict[str, Any]:
    """What ``snapcraft expand-extensions`` runs (snapcraft/commands/extensions.py)."""
    try:
        data = process_yaml(project_dir / "snap" / "snapcraft.yaml")
        arch = str(craft_platforms.DebianArchitecture.from_host())
        data = apply_yaml(data, arch, arch)
        data.pop("architectures", None)
        data.pop("platforms", None)
        extract_parse_info(data)
        return {"yaml": models.Project.unmarshal(data).to_yaml_string()}
    except Exception as exc:  # noqa: BLE001
        return {"error": _error(exc)}


def check(project_dir: Path, prime: Path) -> dict[str, Any]:
    """Both judgements for one project directory."""
    os.chdir(project_dir)  # snapcraft resolves snap/snapcraft.yaml against the working directory
    raw = process_yaml(project_dir / "snap" / "snapcraft.yaml")
    # what Snapcraft._enable_craft_parts_features does before any command runs
    craft_parts.Features.reset()
    craft_parts.Features(enable_partitions=bool(raw.get("components")))
    try:
        builds = _builds(project_dir, prime)
    except Exception as exc:  # noqa: BLE001
        builds = [{"platform": None, "error": _error(exc), "trace": traceback.format_exc()}]
    return {"builds": builds, "expand": _expand(project_dir)}


def main() -> int:
    dirs = [Path(d).resolve() for d in json.load(sys.stdin)]
    with tempfile.TemporaryDirectory(prefix="snapcraft-oracle-") as tmp:
        craft_cli.emit.init(
            craft_cli.EmitterMode.QUIET, "snapcraft", "oracle", log_filepath=Path(tmp) / "log"
        )
        services.register_snapcraft_services()
        prime = Path(tmp) / "prime"  # empty: snap.yaml's default LD_LIBRARY_PATH scans it
        prime.mkdir()
        try:
            results = {str(d): check(d, prime) for d in dirs}
        finally:
            craft_cli.emit.ended_ok()
    json.dump(results, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
