"""``snapbuild new``: a complete manifest written from the model files themselves.

Copying a dozen architecture facts by hand from a model card is how a manifest ends up with a
wrong head count that silently skews every memory estimate. Here every fact comes from the file
(:mod:`snapbuild.inspect.gguf`, :mod:`snapbuild.inspect.exported`), the sha256 and size are
computed, the engines are every catalog runtime that reads the format and serves the model's
kind, and what no file can say (title, description, licence when the file has none, download
URLs) is written as a value marked ``REVIEW`` and listed for the packager. Files of several sizes
of one family make a model ladder (:mod:`snapbuild.inspect.sizes`): one option per size, the
largest first, and engines that name a quantization.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from runtimes.catalog import RuntimeEntry, load_catalog
from snapbuild.inspect.gguf import FileFacts, is_gguf, read_gguf_facts
from snapbuild.inspect.sizes import group_sizes, option_name, split_facts
from snapbuild.manifest.filenames import (
    CONTROL,
    RULE,
    file_path_problem,
    one_line,
    safe_file_name,
)
from snapbuild.manifest.ladder import DEFAULT_MIN_TOKENS_PER_SECOND
from snapbuild.manifest.ports import derived_port
from snapbuild.manifest.spdx import license_problem, spdx_id
from snapbuild.selection.hardware import vendor_name
from snapcommon.errors import UsageError
from snapcommon.files import sha256_of

# files exported models keep beside their weights that the runtimes read
COMPANIONS = ("tokenizer.json", "tokenizer_config.json", "config.json", "special_tokens_map.json")
REVIEW = "REVIEW"


@dataclass(frozen=True)
class Source:
    """One artifact to package: its facts and the files that make it up."""

    path: Path
    facts: FileFacts
    files: tuple[Path, ...]


@dataclass
class Scaffold:
    """The manifest data, its per-key comments, and the report for the packager."""

    data: dict[str, Any]
    comments: dict[str, str] = field(default_factory=dict)  # "model.kind" -> comment
    decided: list[str] = field(default_factory=list)
    review: list[str] = field(default_factory=list)

    def yaml_text(self, sources: list[Path]) -> str:
        """The manifest as commented YAML (file names and notes escaped onto one line each: a
        newline in a file name must not start a YAML key)."""
        names = ", ".join(one_line(p.name) for p in sources)
        head = [f"# Written by `snapbuild new` from {names}."]
        head += [f"# {REVIEW}: {one_line(line)}" for line in self.review]
        # no wrapping: every scalar on its key's line, so a comment never lands inside a value
        text = yaml.safe_dump(self.data, sort_keys=False, allow_unicode=True, width=1 << 30)
        return "\n".join(head) + "\n" + _annotate(text, self.comments)


def _annotate(text: str, comments: dict[str, str]) -> str:
    """Append ``# comment`` to the lines of top-level and ``model.`` keys."""
    out = []
    section = ""
    for line in text.splitlines():
        match = re.match(r"^( *)([a-z0-9-]+):", line)
        if match and not match.group(1):
            section = match.group(2)
            key = section
        elif match and len(match.group(1)) == 2:
            key = f"{section}.{match.group(2)}"
        else:
            key = ""
        out.append(f"{line}  # {one_line(comments[key])}" if key in comments else line)
    return "\n".join(out) + "\n"


def inspect_source(path: Path) -> Source:
    """Read one SOURCE: a GGUF file, an ONNX model (file or directory), or an IR directory."""
    if CONTROL.search(str(path)):
        raise UsageError(
            f"the file name '{one_line(str(path))}' holds a line break or control character",
            details="a manifest names its model files; such a name would not survive in one",
            resolution="rename the file (letters, digits, '.', '_', '+', '-'), then run new again",
        )
    if not path.exists():
        raise UsageError(f"no such file or directory: {path}", resolution="check the path")
    if path.is_file() and is_gguf(path):
        return Source(path, read_gguf_facts(path), (path,))
    from snapbuild.inspect.exported import read_ir_facts, read_onnx_facts

    if path.is_file() and path.suffix == ".onnx":
        extra = [path.parent / c for c in COMPANIONS if (path.parent / c).is_file()]
        data = sorted(path.parent.glob(path.name + "*data"))
        return Source(path, read_onnx_facts(path), (path, *data, *extra))
    if path.is_dir():
        files = tuple(
            sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
        )
        if any(p.suffix == ".xml" for p in files):
            return Source(path, read_ir_facts(path), files)
        if any(p.suffix == ".onnx" for p in files):
            return Source(path, read_onnx_facts(path), files)
    raise UsageError(
        f"{path} is not a model snapbuild can read",
        details="expected a GGUF file, an ONNX model (.onnx or a directory with one) or an "
        "OpenVINO IR directory (.xml and .bin)",
        resolution="give the model file or the exported model's directory",
    )


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    slug = re.sub(r"-+", "-", slug)[:40].strip("-")
    return slug if re.search(r"[a-z]", slug) and len(slug) >= 2 else f"model-{slug}".strip("-")


def new_manifest(
    paths: list[Path],
    *,
    output: Path,
    name: str | None = None,
    url_base: str | None = None,
    license_text: str | None = None,
) -> Scaffold:
    """The manifest for ``paths`` (one model in one or more quantizations, or several sizes of
    one family: a ladder), to be written at ``output`` (local paths are written relative to its
    directory)."""
    sources = [inspect_source(p) for p in paths]
    groups = group_sizes([s.facts for s in sources])
    lead = sources[groups[0][0]].facts
    snap = _slug(name or lead.basename or lead.name or sources[0].path.name.split(".")[0])
    sc = Scaffold(data={})
    _metadata(sc, snap, lead, license_text)
    if len(groups) > 1:
        _ladder(sc, snap, sources, groups, output.parent, url_base)
        return sc
    facts = _kebab(lead.facts)
    sc.data["model"] = {"architecture": facts.pop("architecture"), "kind": lead.kind, **facts}
    sc.decided.append(
        f"model facts from {lead.path.name}: "
        + ", ".join(f"{k} {v}" for k, v in sc.data["model"].items())
    )
    _kind_notes(sc, lead)
    _check_templates(sc, sources)
    sc.data["artifacts"] = [_artifact(sc, snap, s, output.parent, url_base) for s in sources]
    sc.data["engines"] = _engines(sc, sources, sc.data["artifacts"], lead.kind)
    return sc


def _kebab(facts: dict[str, Any]) -> dict[str, Any]:
    return {k.replace("_", "-"): v for k, v in facts.items()}


def _ladder(
    sc: Scaffold,
    snap: str,
    sources: list[Source],
    groups: list[list[int]],
    base: Path,
    url_base: str | None,
) -> None:
    """Options (largest first) with their own facts, the family's shared facts, one artifact
    per file tagged with its option, engines by quantization."""
    lead = sources[groups[0][0]].facts
    shared, own = split_facts([sources[g[0]].facts for g in groups])
    sc.data["min-tokens-per-second"] = DEFAULT_MIN_TOKENS_PER_SECOND
    sc.comments["min-tokens-per-second"] = (
        f"{REVIEW}: the decode speed a larger size must reach on a machine to be chosen"
    )
    family = _kebab(shared)
    sc.data["model"] = {"architecture": family.pop("architecture"), "kind": lead.kind, **family}
    _kind_notes(sc, lead)
    taken: set[str] = set()
    options: list[dict[str, Any]] = []
    artifacts: list[dict[str, Any]] = []
    for group, facts in zip(groups, own, strict=True):
        option = option_name(sources[group[0]].facts, taken)
        taken.add(option)
        options.append({"name": option, "model": _kebab(facts)})
        artifacts += [_artifact(sc, snap, sources[i], base, url_base, option) for i in group]
        files = ", ".join(sources[i].path.name for i in group)
        sc.decided.append(f"option {option}: {files}")
    sc.data["options"] = options
    sc.data["artifacts"] = artifacts
    sc.data["engines"] = _engines(sc, sources, artifacts, lead.kind, ladder=True)
    sc.review.append(
        "options: listed largest first, the order the selector prefers them in; rename them "
        "(from their parameter counts) or give each a title"
    )


def _metadata(sc: Scaffold, snap: str, lead: FileFacts, license_text: str | None) -> None:
    title = lead.name or snap
    ctx = int(lead.facts.get("context_length") or 4096)
    default_ctx = min(4096, ctx)
    licence = license_text or (spdx_id(lead.license) if lead.license else None)
    sc.data.update(
        {
            "schema-version": 1,
            "name": snap,
            "title": title,
            "summary": f"{title} with a local OpenAI-compatible API"[:78],
            "description": f"{title}, packaged with snapbuild. It picks the best engine for the "
            "machine and serves an OpenAI-compatible API.",
            "license": licence or "Proprietary",
            "version": "1.0",
            "base": "core24",
            "architectures": ["amd64", "arm64"],
            "default-port": derived_port(snap),
            "default-context-size": default_ctx,
            "min-context-size": min(512, default_ctx),
        }
    )
    sc.decided.append(f"snap name {snap!r}, default port {sc.data['default-port']}")
    for key in ("title", "summary", "description", "version"):
        sc.comments[key] = f"{REVIEW}: written by snapbuild new"
    sc.review.append("title, summary, description and version: say what the snap is")
    if license_text is None and licence is None:
        sc.comments["license"] = f"{REVIEW}: the file states no licence"
        sc.review.append(
            "license: the model file states none (or none snapd accepts: "
            f"{lead.license!r}); give the model's SPDX id, or leave Proprietary"
        )
    elif (problem := license_problem(str(licence))) is not None:
        sc.review.append(f"license: {problem}")
    else:
        sc.decided.append(f"license {licence} (from {'--license' if license_text else 'the file'})")


def _kind_notes(sc: Scaffold, lead: FileFacts) -> None:
    choice = lead.template
    sc.decided.append(f"kind {lead.kind}" + (f": {choice.reason}" if choice else ""))
    if choice is not None and choice.source == "family":
        sc.comments["model.kind"] = f"{REVIEW}: chat template from the {choice.family} family"
        sc.review.append(f"model.kind: {choice.reason}; give model.chat-template if it is wrong")
    elif choice is not None and choice.source == "none":
        sc.comments["model.kind"] = f"{REVIEW}: no chat template: completions only"
        sc.review.append(
            "model.kind: completion (no chat template fits); for a chat model add its Jinja2 "
            "template as model.chat-template and set kind: chat"
        )
    sc.review += [n for n in lead.notes]


def _check_templates(sc: Scaffold, sources: list[Source]) -> None:
    """Each file's own chat template rendered in the sandbox before a manifest names it: an
    error stops ``new`` (nothing is written), a warning is listed for review."""
    from snapbuild.manifest.checks import gguf_template_findings

    for source in sources:
        for finding in gguf_template_findings(source.facts, "model.chat-template"):
            if finding.level == "error":
                raise UsageError(
                    f"{source.path.name} carries a chat template llama-server cannot use safely",
                    details=finding.message,
                    resolution=f"{finding.fix}; no manifest was written",
                )
            sc.review.append(f"model.chat-template: {finding.message}")


def _artifact(
    sc: Scaffold,
    snap: str,
    src: Source,
    base: Path,
    url_base: str | None,
    option: str | None = None,
) -> dict[str, Any]:
    quant = src.facts.quantization or "fp32"
    name = _slug(f"{snap}-{option}-{quant}" if option else f"{snap}-{quant}")
    files = []
    for path in src.files:
        entry: dict[str, Any] = {"path": _file_name(sc, path)}
        if url_base:
            entry["url"] = f"{url_base.rstrip('/')}/{urllib.parse.quote(path.name)}"
        entry["sha256"] = sha256_of(path)
        entry["size"] = path.stat().st_size
        entry["local"] = {"path": _local_path(path, base)}
        files.append(entry)
    sc.decided.append(
        f"artifact {name}: {src.facts.format} {quant} ({src.facts.quantization_source}), "
        f"{len(files)} file(s), {sum(f['size'] for f in files)} bytes, sha256 computed"
    )
    if not url_base:
        sc.review.append(
            f"artifact {name}: local-only (no url): `make` copies the files into the project; "
            "give --url-base (or url: per file) to download them in the build instead"
        )
    tagged = {"option": option} if option else {}
    return {
        "name": name,
        **tagged,
        "format": src.facts.format,
        "quantization": quant,
        "files": files,
    }


def _file_name(sc: Scaffold, path: Path) -> str:
    """The file's name in the snap: its own, unless YAML or a shell would misread it (the one
    rule of :mod:`snapbuild.manifest.filenames`); ``local.path`` keeps the real one."""
    safe = _snap_name(path.name)
    if safe == path.name:
        return safe
    sc.review.append(f"file {path.name!r} is named {safe!r} in the snap (the rule: {RULE})")
    return safe


def _snap_name(name: str) -> str:
    """A file's name in the snap (:func:`_file_name`'s rule, without the review note)."""
    return name if file_path_problem(name) is None else safe_file_name(name)


def _local_path(path: Path, base: Path) -> str:
    """Relative to the manifest's directory when the file is under it (the two move together),
    else absolute."""
    rel = os.path.relpath(path.resolve(), base.resolve())
    return str(path.resolve()) if rel.startswith("..") else rel


def _engine_name(entry: RuntimeEntry) -> str:
    return entry.id.removeprefix("llama.cpp-").removeprefix("onnxruntime-")


def _summary(entry: RuntimeEntry, quant: str) -> str:
    if entry.device == "cpu":
        where = "the CPU"
    else:
        names = [vendor_name(v) for v in entry.vendors]
        listed = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
        where = f"an {listed} {entry.device.upper()}"  # AMD, Intel, NVIDIA: all read "an"
    return f"{entry.family} on {where} ({entry.id}), {quant}"


def _engines(
    sc: Scaffold,
    sources: list[Source],
    artifacts: list[dict[str, Any]],
    kind: str,
    *,
    ladder: bool = False,
) -> list[dict[str, Any]]:
    """Every catalog runtime that reads an artifact's format and serves ``kind``: per artifact
    for one model, per quantization for a ladder (each engine then runs every size)."""
    engines: list[dict[str, Any]] = []
    by_file = {a["files"][0]["path"]: a for a in artifacts}
    picks: dict[tuple[str, str], dict[str, Any]] = {}
    for src in sources:
        art = by_file[_snap_name(src.files[0].name)]
        key = (src.facts.format, art["quantization"]) if ladder else (art["name"], "")
        picks.setdefault(key, art)
    for i, art in enumerate(picks.values()):
        fmt = art["format"]
        suffix = "" if i == 0 else "-" + _slug(art["quantization"])
        for entry in load_catalog().runtimes:
            if fmt not in entry.formats or kind not in entry.capabilities:
                continue
            runs = {"quantization": art["quantization"]} if ladder else {"artifact": art["name"]}
            engine: dict[str, Any] = {
                "name": f"{_engine_name(entry)}{suffix}",
                "summary": _summary(entry, art["quantization"]),
                "runtime": entry.id,
                **runs,
            }
            if entry.family == "openvino" and fmt == "gguf":
                engine["experimental"] = True
            engines.append(engine)
    if not engines:
        raise UsageError(
            f"no runtime of runtimes/catalog.yaml serves a {kind} model in "
            f"{sources[0].facts.format}",
            resolution="convert the model to a format a runtime reads (GGUF for chat models)",
        )
    sc.decided.append("engines: " + ", ".join(f"{e['name']} ({e['runtime']})" for e in engines))
    if any(e.get("experimental") for e in engines):
        sc.review.append(
            "engines marked experimental: OpenVINO GenAI reads only some GGUF layouts; keep them "
            "if `snapbuild try --engine NAME` works, else delete them"
        )
    sc.review.append(
        "engines: add requires (e.g. gpu min-compute-capability, cpu-flags) where a build needs "
        "more than the runtime's device; `snapbuild engines` shows what each machine gets"
    )
    return engines
