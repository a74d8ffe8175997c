"""Checks of a loaded manifest against the world: the licence snapd accepts, and the model files
that are on this machine.

The manifest loader checks a manifest on its own terms. These checks compare it with what a
local file says, where a file is at hand (a ``local:`` copy or one ``snapbuild fetch`` cached):
its size, sha256 and format (GGUF magic, ONNX / OpenVINO IR that load), and the model facts the
selector trusts (layers, heads, sizes...), each difference named with what the file says and the
key it says it in. ``validate``, ``make`` and ``try`` run them, so a wrong hash or a text file
named ``.gguf`` stops at the first command rather than at ``snap pack`` or in a restart loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from snapbuild.inspect.gguf import FileFacts, is_gguf, read_gguf_facts
from snapbuild.manifest.ladder import view_for
from snapbuild.manifest.model import Artifact, ArtifactFile, Manifest
from snapbuild.manifest.spdx import license_problem
from snapcommon.errors import ManifestError, UsageError
from snapcommon.files import sha256_of

Level = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One difference or risk: the manifest field, what is wrong, and how to fix it."""

    level: Level
    field: str
    message: str
    fix: str

    def format(self) -> str:
        return f"{self.level}: {self.field}: {self.message}\n  fix: {self.fix}"

    def to_data(self) -> dict[str, str]:
        return {"level": self.level, "field": self.field, "message": self.message, "fix": self.fix}


def check_manifest(manifest: Manifest, *, deep: bool = False) -> list[Finding]:
    """Every finding for ``manifest``: its licence, its chat template, then each artifact found
    locally (``deep``: every file hashed, cached ones too, whatever their stamps say)."""
    out = _license(manifest)
    if manifest.model.chat_template:
        out += template_findings(
            manifest.model.chat_template,
            "the manifest's model.chat-template",
            "model.chat-template",
        )
    for index, artifact in enumerate(manifest.artifacts):
        out += _artifact(manifest, index, artifact, deep)
    return out


def require_sound(manifest: Manifest, shown: str, warn: Callable[[str], None]) -> list[Finding]:
    """Run the checks; pass warnings to ``warn``; raise :class:`ManifestError` on errors."""
    findings = check_manifest(manifest)
    for f in findings:
        if f.level == "warning":
            warn(f.format())
    errors = [f for f in findings if f.level == "error"]
    if errors:
        count = len(errors)
        raise ManifestError(
            f"{shown} does not match its model files ({count} problem{'s' * (count != 1)})",
            details="\n".join(f.format() for f in errors),
            resolution=errors[0].fix if count == 1 else "fix each problem listed above",
        )
    return findings


def _license(manifest: Manifest) -> list[Finding]:
    problem = license_problem(manifest.license)
    if problem is None:
        return []
    return [
        Finding(
            "warning",
            "license",
            f"{problem}: snapd accepts only SPDX expressions (SPDX License List "
            "3.11 ids, AND/OR/WITH) in a snap's license, and `snap pack` refuses others",
            "use an SPDX expression when the model has one (e.g. Apache-2.0); for a licence "
            "that has no SPDX id (Gemma, Llama community licences) the built snap leaves "
            "`license:` out and ships the licence text as a document under usr/share/doc",
        )
    ]


def present_file(
    manifest: Manifest, artifact: Artifact, file: ArtifactFile, *, deep: bool = False
) -> tuple[Path, bool]:
    """Where the file is on this machine and whether to hash it: a ``local:`` copy (never
    verified by ``fetch``), a cached one whose stamp no longer holds, any with ``deep``; raises
    nothing: a missing file is ``(Path(), False)``."""
    from snapbuild.fetch.artifacts import artifact_dir, local_file
    from snapbuild.fetch.verified import stamp_holds

    if file.local is not None and (found := local_file(file.local)) is not None:
        return found, True
    cached = artifact_dir(manifest, artifact) / file.path
    if not cached.is_file():
        return Path(), False
    return cached, deep or not stamp_holds(cached, file.sha256)


def _artifact(manifest: Manifest, index: int, artifact: Artifact, deep: bool) -> list[Finding]:
    out: list[Finding] = []
    where = f"artifacts[{index}]"
    paths: dict[str, Path] = {}
    for j, file in enumerate(artifact.files):
        path, hash_it = present_file(manifest, artifact, file, deep=deep)
        field = f"{where}.files[{j}]"
        if path == Path():
            if file.url is None and file.local is not None:
                out.append(
                    Finding(
                        "error",
                        f"{field}.local.path",
                        f"the local-only file {file.path} is not at {file.local.path}",
                        "put the file there or correct local.path (relative to the manifest)",
                    )
                )
            continue
        paths[file.path] = path
        out += _file(field, file, path, hash_it=hash_it)
    if any(f.level == "error" for f in out) or len(paths) != len(artifact.files):
        return out  # facts are read from complete, correct files only
    if artifact.role == "projector":
        return out + _projector(where, artifact, paths[artifact.files[0].path])
    try:
        facts = _facts(artifact, paths, manifest.model.chat_template)
    except UsageError as err:
        return out + [
            Finding(
                "error",
                where,
                f"{err.brief}: {err.details or ''}".rstrip(": "),
                err.resolution or "give a loadable model file",
            )
        ]
    if facts is not None:
        # a ladder's file states its own size's facts: compare with that option's view
        out += _compare(view_for(manifest, artifact.option), where, artifact, facts)
        out += gguf_template_findings(facts, where)
    return out


def template_findings(template: str, name: str, field: str) -> list[Finding]:
    """The chat template rendered in the sandbox (:mod:`runtimes.template_check`): an error
    when llama-server could not use it safely, a warning when it may not work."""
    from runtimes.template_check import check_template

    problem = check_template(template)
    if problem is None:
        return []
    fix = (
        "fix the template (llama.cpp renders Jinja2 without include, import or extends), or "
        "give a working one as model.chat-template, which wins over the GGUF's"
        if problem.level == "error"
        else "nothing to do if the model's conversations differ from the sample; else fix it"
    )
    return [Finding(problem.level, field, problem.describe(name), fix)]


def require_safe_template(path: Path, supplied: str | None) -> None:
    """Before serving ``path`` (a GGUF; anything else passes): the template llama-server will
    run must render in the sandbox, else a :class:`UsageError` naming it."""
    from runtimes.chat_templates import template_for_file

    choice = template_for_file(path, supplied)
    if choice is None or choice.template is None or choice.source == "family":
        return
    name = (
        "the manifest's model.chat-template"
        if choice.source == "manifest"
        else (f"the chat template of {path.name} (tokenizer.chat_template)")
    )
    for finding in template_findings(choice.template, name, "model.chat-template"):
        if finding.level == "error":
            raise UsageError(
                f"{name} cannot be served safely", details=finding.message, resolution=finding.fix
            )


def gguf_template_findings(facts: FileFacts, field: str) -> list[Finding]:
    """:func:`template_findings` for the GGUF's own template, when it is the one in use."""
    choice = facts.template
    if choice is None or choice.source != "gguf" or choice.template is None:
        return []
    name = f"the chat template of {facts.path.name} (tokenizer.chat_template)"
    return template_findings(choice.template, name, field)


def _projector(where: str, artifact: Artifact, path: Path) -> list[Finding]:
    """A projector is llama.cpp's mmproj GGUF reading what the manifest says it reads."""
    from snapbuild.inspect.gguf import projector_inputs

    try:
        reads = projector_inputs(path)
    except UsageError as err:
        return [Finding("error", where, err.brief, err.resolution or "give the mmproj GGUF")]
    missing = [i for i in artifact.inputs if i not in reads]
    if not missing:
        return []
    says = ", ".join(reads) if reads else "nothing (general.architecture is not clip)"
    return [
        Finding(
            "error",
            f"{where}.inputs",
            f"the manifest says the projector reads {', '.join(missing)}; {path.name} reads {says}",
            "give llama.cpp's mmproj GGUF for this model (its convert_hf_to_gguf.py --mmproj "
            "writes one), or correct inputs",
        )
    ]


def _file(field: str, file: ArtifactFile, path: Path, *, hash_it: bool) -> list[Finding]:
    size = path.stat().st_size
    if size != file.size:
        return [
            Finding(
                "error",
                f"{field}.size",
                f"the manifest says {file.size} bytes; {path} is {size} bytes",
                f"set size: {size} and sha256 to the file's (`snapbuild new {path}` computes "
                "both), or replace the file with the right one",
            )
        ]
    if hash_it:
        digest = sha256_of(path)
        if digest != file.sha256:
            return [
                Finding(
                    "error",
                    f"{field}.sha256",
                    f"the manifest says {file.sha256}; {path} has sha256 {digest}",
                    _sha256_fix(path, digest),
                )
            ]
    if path.suffix == ".gguf" and not is_gguf(path):
        with path.open("rb") as fh:
            head = fh.read(8)
        return [
            Finding(
                "error",
                f"{field}.path",
                f"{path} is not a GGUF file: it starts with {head!r}, not b'GGUF'",
                "give the real model file (llama.cpp's GGUF format)",
            )
        ]
    return []


def _valid_fact(model: dict[str, Any], name: str, value: Any) -> bool:
    """Whether the manifest would accept ``value`` for ``name``: a fix is only suggested when
    following it gives a valid manifest."""
    from pydantic import ValidationError

    from snapbuild.manifest.model import ModelFacts

    try:
        ModelFacts.model_validate({**model, name: value})
    except ValidationError:
        return False
    return True


def _no_fix(key: str, value: Any) -> str:
    return (
        f"the file's {value!r} is not a valid {key}: the file's metadata is wrong; keep the "
        "manifest's value if it is right, or convert the model again"
    )


def _sha256_fix(path: Path, digest: str) -> str:
    """A cached download that changed is downloaded again; a local file is the packager's."""
    from snapbuild.paths import cache_dir

    if path.resolve().is_relative_to(cache_dir().resolve()):
        return "the cached copy is damaged: `snapbuild fetch` downloads it again"
    return f"set sha256: {digest} if this file is the one to ship, else replace it"


def _facts(artifact: Artifact, paths: dict[str, Path], template: str | None) -> FileFacts | None:
    """The facts the artifact's files state (GGUF header, ONNX graph, IR + config.json)."""
    if artifact.format == "gguf":
        first = paths[artifact.files[0].path]
        return read_gguf_facts(first, template)
    directory = {p.parent for p in paths.values()}
    if artifact.format == "onnx":
        from snapbuild.inspect.exported import read_onnx_facts

        model = next((p for p in paths.values() if p.suffix == ".onnx"), None)
        return read_onnx_facts(model) if model is not None else None
    if len(directory) == 1:
        from snapbuild.inspect.exported import read_ir_facts

        _load_ir(paths)
        return read_ir_facts(directory.pop())
    return None


def _load_ir(paths: dict[str, Path]) -> None:
    """Each IR graph must load (OpenVINO's reader), when OpenVINO is installed."""
    try:
        import openvino
    except ImportError:  # pragma: no cover - openvino ships with snapbuild's extras
        return
    core = openvino.Core()
    for path in paths.values():
        if path.suffix == ".xml":
            try:
                core.read_model(str(path))
            except Exception as exc:
                raise UsageError(
                    f"OpenVINO cannot read {path}",
                    details=str(exc).strip().splitlines()[0] if str(exc).strip() else None,
                    resolution="export the model again; the .xml and its .bin must match",
                ) from None


def _compare(manifest: Manifest, where: str, artifact: Artifact, facts: FileFacts) -> list[Finding]:
    out: list[Finding] = []
    model: dict[str, Any] = manifest.model.model_dump()
    for name, value in facts.facts.items():
        key = f"model.{name.replace('_', '-')}"
        said = model.get(name)
        source = f"{facts.path.name} says {value!r} ({facts.sources.get(name, 'its metadata')})"
        fix = f"set {key}: {value}" if _valid_fact(model, name, value) else _no_fix(key, value)
        if said is None:
            if name != "architecture":
                out.append(Finding("warning", key, f"not given; {source}", fix))
        elif said != value and not (name == "architecture" and value == "unknown"):
            out.append(Finding("error", key, f"the manifest says {said!r}; {source}", fix))
    if facts.quantization and facts.quantization.casefold() != artifact.quantization.casefold():
        out.append(
            Finding(
                "error",
                f"{where}.quantization",
                f"the manifest says {artifact.quantization}; {facts.path.name} is "
                f"{facts.quantization} ({facts.quantization_source})",
                f"set quantization: {facts.quantization}",
            )
        )
    choice = facts.template
    if manifest.model.kind == "chat" and choice is not None and choice.source in ("family", "none"):
        fix = (
            "nothing to do if that template is right; else give model.chat-template"
            if choice.template
            else "give the model's template as model.chat-template, or set model.kind: "
            "completion (a base model)"
        )
        out.append(Finding("warning", "model.chat-template", choice.reason, fix))
    return out
