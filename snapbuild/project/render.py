"""Writing a snapcraft project to disk through a strict jinja2 environment.

Templates never see raw manifest text in a YAML position: values reach YAML through the
``to_yaml`` filter (``yaml.safe_dump``) and comments through ``yaml_comment`` (a one-line JSON
string), and ``StrictUndefined`` turns a misspelt variable into an error instead of an empty
string. Output directories are guarded: snapbuild only replaces what it wrote before.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import yaml

from runtimes.catalog import DEFAULT_LIBRARY_PATHS, RuntimeCatalog
from snapbuild import __version__
from snapbuild.paths import templates_dir
from snapbuild.project.naming import KNOWN_HOOKS
from snapbuild.project.plan import BuildPlan
from snapbuild.project.snapcraft_yaml import (
    COMPONENT_SITE_PACKAGES,
    DOC_SOURCE_DIR,
    RUNTIME_SOURCE_DIR,
    snap_license,
)
from snapcommon.errors import UsageError

MARKER = ".snapbuild-output.json"
HOOKS = ("install", "post-refresh", "configure")
SOURCE_DIR = "snapbuild-src"
# What the python part needs to install this project: its packages and build metadata.
SOURCE_ITEMS = (
    "pyproject.toml",
    "README.md",
    "LICENSE",
    "snapcommon",
    "hwprobe",
    "snapbuild",
    "runtimes",
    "snaps",
)
# Toolkit-only packages, left out: `snapbuild try`'s machinery and its snapctl stand-in simulate
# snapd from outside a snap, and `snapbuild pack` builds snaps; nothing an installed snap runs
# may use them.
TOOLKIT_ONLY = ("snapbuild/trial", "snapbuild/pack")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


_SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter when present


class _Dumper(_SafeDumper):  # type: ignore[valid-type,misc]
    """SafeDumper writing multi-line strings as literal blocks, so descriptions stay readable."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def to_yaml(value: Any) -> str:
    """Block-style YAML for any plain data, without a trailing newline.

    Only the safe representers are registered, and PyYAML itself falls back to a quoted
    scalar whenever a literal block could not hold the string faithfully.
    """
    text = yaml.dump(value, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return text.rstrip("\n")


def yaml_comment(value: Any) -> str:
    """A value safe inside a YAML comment: one line, quoted as JSON."""
    return json.dumps(str(value))


@cache
def environment(root: Path) -> jinja2.Environment:
    """The strict jinja2 environment over ``root`` (the templates directory)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(root)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["to_yaml"] = to_yaml
    env.filters["yaml_comment"] = yaml_comment
    return env


def render(template: str, **values: Any) -> str:
    """Render ``templates/<template>`` with ``values``."""
    return (
        environment(templates_dir())
        .get_template(template)
        .render(generator_version=__version__, **values)
    )


def yaml_document(comment: str, data: Any) -> str:
    """``data`` as a YAML file under a ``#`` comment (one line per line of ``comment``).

    snapcraft.yaml and the snap's data files are dumped here, in code, not through a template:
    their whole shape is data that :mod:`snapbuild.project.snapcraft_yaml` builds (and the tests
    check against snapcraft's own project model), so a template would be one line, ``{{ data |
    to_yaml }}``, that only hides where the shape comes from. Templates stay for files that are
    text with a few values in them (the hooks, the copyright file, the CI workflow).
    """
    header = "".join(f"# {line}\n" for line in comment.splitlines())
    return f"{header}{to_yaml(data)}\n"


def _library_paths(catalog: RuntimeCatalog, runtime_id: str) -> list[str]:
    entry = catalog.get(runtime_id)
    native = entry.build.native if entry and entry.build else None
    return list(native.library_paths if native else DEFAULT_LIBRARY_PATHS)


def engine_data(plan: BuildPlan, catalog: RuntimeCatalog) -> dict[str, Any]:
    """``$SNAP/snapbuild/components.yaml``: what each engine needs installed, where files live.

    ``artifacts`` maps every artifact file to its component, or, for a file stored in pieces,
    to the ordered pieces to join (and the checksum to verify) at install time. An artifact
    spread over several components (GGUF splits) needs its files gathered into one directory.
    """
    components: dict[str, Any] = {}
    for comp in plan.components:
        if comp.kind == "runtime":
            components[comp.name] = {
                "kind": "runtime",
                "runtimes": list(comp.runtimes),
                "python-path": COMPONENT_SITE_PACKAGES,
                # relative to the component; $ARCH_TRIPLET is the snap environment's variable
                # (the Debian multiarch triplet, e.g. x86_64-linux-gnu)
                "library-paths": _library_paths(catalog, comp.runtimes[0]),
                # llama-server and the GGML backends (loaded from the executable's directory)
                "executable-paths": ["usr/bin"],
            }
        else:
            components[comp.name] = {
                "kind": "artifact",
                "artifact": comp.artifact,
                "size": comp.size,
            }
    return {
        "schema-version": 1,
        "snap": plan.model,
        "variant": plan.variant,
        **_engines(plan),
        "components": components,
        "artifacts": _artifact_files(plan),
    }


def _engines(plan: BuildPlan) -> dict[str, Any]:
    """Each engine's components; a ladder's per option (``options: {4b: {engines: ...}}``), so
    the snap installs the one size it runs."""
    entries: dict[str | None, dict[str, Any]] = {}
    for e in plan.engines:
        entries.setdefault(e.option, {})[e.name] = {
            "runtime": e.runtime,
            "artifact": e.artifact,
            "components": list(e.components),
        }
    if None in entries:
        return {"engines": entries[None]}
    return {"options": {option: {"engines": engines} for option, engines in entries.items()}}


def _artifact_files(plan: BuildPlan) -> dict[str, Any]:
    joins = {(j.artifact, j.path): j for j in plan.joins}
    out: dict[str, Any] = {}
    for comp in plan.components:
        if comp.artifact is None:
            continue
        entry = out.setdefault(comp.artifact, {"components": [], "files": []})
        entry["components"].append(comp.name)
        for piece in comp.pieces:
            join = joins.get((piece.artifact, piece.file))
            if join is None:
                entry["files"].append({"path": piece.path, "component": comp.name})
            elif piece.index == 1:
                entry["files"].append(
                    {
                        "path": join.path,
                        "sha256": join.sha256,
                        "size": join.size,
                        "pieces": [{"component": p.component, "path": p.path} for p in join.pieces],
                    }
                )
    return out


def project_files(
    plan: BuildPlan,
    project: dict[str, Any],
    manifest_data: dict[str, Any],
    catalog: RuntimeCatalog,
) -> dict[str, str]:
    """Every text file of the project, by path relative to the output directory."""
    files = {
        "snap/snapcraft.yaml": yaml_document(
            f"Generated by snapbuild {__version__} from the {yaml_comment(plan.model)} manifest\n"
            f"(variant {yaml_comment(plan.variant)}). Regenerate with `snapbuild make` rather "
            "than editing.",
            project,
        ),
    }
    for hook in HOOKS:
        assert hook in KNOWN_HOOKS
        files[f"snap/hooks/{hook}"] = render("snap/hook.sh.j2", hook=hook)
    files["snapbuild-data/manifest.yaml"] = yaml_document(
        f"{yaml_comment('The manifest this snap was built from')}, written by snapbuild "
        f"{__version__}.",
        manifest_data,
    )
    files["snapbuild-data/components.yaml"] = yaml_document(
        f"{yaml_comment('Engines, their components and split files')}, written by snapbuild "
        f"{__version__}.",
        engine_data(plan, catalog),
    )
    files[f"{DOC_SOURCE_DIR}/copyright"] = render(
        "snap/copyright.j2",
        snap=plan.model,
        manifest=manifest_data,
        spdx=snap_license(manifest_data["license"]),
    )
    if any(p.get("source") == RUNTIME_SOURCE_DIR for p in project["parts"].values()):
        files[f"{RUNTIME_SOURCE_DIR}/README.md"] = render("snap/runtime-source.md.j2")
    return files


def marker_text(plan: BuildPlan, files: Mapping[str, str], vendored: bool) -> str:
    """The record that marks a directory as snapbuild's output (and what to replace next time)."""
    written = sorted([*files, *([SOURCE_DIR + "/"] if vendored else [])])
    record = {
        "generator": "snapbuild",
        "model": plan.model,
        "variant": plan.variant,
        "files": written,
    }
    return json.dumps(record, indent=2) + "\n"


def prepare_output(out: Path, *, force: bool) -> None:
    """Make ``out`` ready: create it, or clear snapbuild's previous output from it.

    A non-empty directory that snapbuild did not write is refused unless ``force`` is given,
    so a mistyped ``-o`` cannot bury someone's work under generated files.
    """
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a directory", resolution="choose another -o")
    if not out.exists():
        out.mkdir(parents=True)
        return
    marker = out / MARKER
    if marker.is_file():
        _remove_previous(out, marker)
    elif any(out.iterdir()) and not force:
        raise UsageError(
            f"{out} is not empty and was not written by snapbuild",
            details="snapbuild replaces only directories holding its own " + MARKER,
            resolution="choose an empty or new directory with -o, or pass --force to write "
            "into it anyway (files snapbuild does not write are kept)",
        )


def _remove_previous(out: Path, marker: Path) -> None:
    try:
        files = json.loads(marker.read_text(encoding="utf-8"))["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise UsageError(
            f"{marker} is not a snapbuild output record",
            details=str(exc),
            resolution="remove it, or pass another -o",
        ) from exc
    root = out.resolve()
    for rel in files:
        target = (out / rel).resolve()
        if root not in target.parents:
            continue  # never follow a record outside the output directory
        if rel.endswith("/") and target.is_dir():
            shutil.rmtree(target)
        elif target.is_file():
            target.unlink()


def write_output(out: Path, files: Mapping[str, str], marker: str) -> None:
    """Write every file (hooks executable), then the marker last."""
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if rel.startswith("snap/hooks/"):
            path.chmod(0o755)
    (out / MARKER).write_text(marker, encoding="utf-8")


def _ignore(project_root: Path) -> Callable[[str, list[str]], set[str]]:
    """What copytree skips: build leftovers anywhere, and the :data:`TOOLKIT_ONLY` paths."""
    skip = {(project_root / path).resolve() for path in TOOLKIT_ONLY}

    def ignore(directory: str, names: list[str]) -> set[str]:
        here = Path(directory).resolve()
        return set(_IGNORE(directory, names)) | {n for n in names if here / n in skip}

    return ignore


def vendor_source(project_root: Path, out: Path) -> None:
    """Copy this project's installable source into ``out/snapbuild-src`` for the python part."""
    if not (project_root / "pyproject.toml").is_file():
        raise UsageError(
            "snapbuild's own source (pyproject.toml) is not available to copy into the project",
            details=f"looked in {project_root}",
            resolution="pass --source with a git URL or path of the snapbuild source",
        )
    dest = out / SOURCE_DIR
    for item in SOURCE_ITEMS:
        src = project_root / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=_ignore(project_root), dirs_exist_ok=True)
        elif src.is_file():
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / item)
