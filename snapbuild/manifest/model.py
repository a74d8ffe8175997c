"""Model manifests: one YAML file per inference snap (``manifests/<name>.yaml``).

A manifest is data: the snap's metadata, the model's architecture facts (for memory estimates),
the weight artifacts, and the engines (runtime + artifact + device requirements). The models
here are frozen, reject unknown keys and use kebab-case keys, so a typo in a manifest is an
error that names the field rather than a silently ignored key. Loading with file/line/field
errors lives in :mod:`snapbuild.manifest.loader`.

A manifest holds one model, or a *ladder*: ``options`` lists sizes of one family (Gemma 3 270M
... 27B), each artifact belongs to one option and each engine names a quantization instead of an
artifact, so one engine applies to every size. :mod:`snapbuild.manifest.ladder` turns a ladder
into one single-model view per option, which is what the selector, the builder and the snap
work with; a manifest without ``options`` is read exactly as before.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, PrivateAttr, field_validator, model_validator

from hwprobe.profile import X86Level
from snapbuild.manifest.filenames import check_file_path, check_local_path
from snapbuild.manifest.ports import derived_port
from snapcommon.model import KebabModel

# snapd's rules: lowercase letters, digits and hyphens; at least one letter; no leading,
# trailing or double hyphen; 2 to 40 characters.
SNAP_NAME_RE = re.compile(r"^(?=.*[a-z])[a-z0-9](?:-?[a-z0-9])*$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")

Architecture = Literal["amd64", "arm64", "armhf", "riscv64", "s390x", "ppc64el", "i386"]
ArtifactFormat = Literal["gguf", "openvino-ir", "onnx"]
GpuVendor = Literal["nvidia", "amd", "intel", "apple", "qualcomm", "other"]
ModelKind = Literal["chat", "completion", "embeddings"]
# What a model takes in. An artifact lists what its own files read; an engine takes in what its
# artifact and its projector take in together.
Modality = Literal["text", "vision", "audio"]
ArtifactRole = Literal["weights", "projector"]

STORE_COMPONENT_LIMIT = 5 * 1000**3  # the Store's per-component size limit, bytes


def _check_sha256(value: str) -> str:
    if not SHA256_RE.match(value):
        raise ValueError("sha256 must be 64 lowercase hexadecimal characters")
    return value


Sha256 = Annotated[str, AfterValidator(_check_sha256)]
# snap metadata links: a web address, or (contact, issues) a mailto: address
_LINK_RE = re.compile(r"^(https?://[^\s]+|mailto:[^\s@]+@[^\s@]+)$")


def _check_link(value: str) -> str:
    if not _LINK_RE.match(value):
        raise ValueError(
            f"{value!r} is not a link: use an https:// (or http://) address, or mailto:ADDRESS"
        )
    return value


Link = Annotated[str, AfterValidator(_check_link)]


def _check_name(value: str, what: str) -> str:
    if not 2 <= len(value) <= 40 or not SNAP_NAME_RE.match(value):
        raise ValueError(
            f"{what} {value!r} is not valid: use 2-40 lowercase letters, digits and single "
            "hyphens, with at least one letter, not starting or ending with a hyphen"
        )
    return value


class VisionFacts(KebabModel):
    """The image encoder's shape: what one image costs in context and in compute memory."""

    image_tokens: int = Field(gt=0)  # context tokens one image becomes (Gemma 3: 256)
    image_size: int = Field(gt=0)  # pixels per side the encoder sees (images are resized)
    patch_size: int = Field(gt=0)
    embedding_size: int = Field(gt=0)  # the encoder's width
    attention_heads: int = Field(gt=0)
    feed_forward_size: int = Field(gt=0)


class ModelFacts(KebabModel):
    """Architecture facts needed to estimate memory; optional when a local GGUF can be read."""

    architecture: str  # "gemma3", "llama", "qwen2", "bert"...
    kind: ModelKind = "chat"
    parameters: int | None = Field(default=None, gt=0)
    layers: int | None = Field(default=None, gt=0)
    attention_heads: int | None = Field(default=None, gt=0)
    kv_heads: int | None = Field(default=None, gt=0)
    head_size: int | None = Field(default=None, gt=0)
    embedding_size: int | None = Field(default=None, gt=0)
    feed_forward_size: int | None = Field(default=None, gt=0)
    vocab_size: int | None = Field(default=None, gt=0)
    # BPE merges llama.cpp keeps in memory (0 for SentencePiece; absent: as many as tokens)
    vocab_merges: int | None = Field(default=None, ge=0)
    context_length: int | None = Field(default=None, gt=0)  # the model's trained maximum
    sliding_window: int | None = Field(default=None, gt=0)  # window of the local layers
    sliding_window_layers: int | None = Field(default=None, ge=0)  # how many layers are local
    # a Jinja2 chat template for a GGUF without a usable one (runtimes/chat_templates.py decides)
    chat_template: str | None = Field(default=None, min_length=1)
    vision: VisionFacts | None = None  # the image encoder, for models that read images
    # true: the model calls tools (function calling); the service proves it at start with one
    # forced tool call and refuses tools with a 400 if that fails (runtimes/gateway/proofs.py)
    tools: bool | None = None


class Shard(KebabModel):
    """One piece of a file split to stay under the Store's component size limit."""

    url: str
    sha256: Sha256
    size: int = Field(gt=0)


class LocalSource(KebabModel):
    """Where a copy of a file lives on the packager's machine: inside an installed PyPI package,
    or at a path (relative paths are relative to the manifest file's directory). A file with a
    ``local:`` and no ``url`` is local-only: ``make`` copies it into the project."""

    python_package: str | None = None  # a distribution whose files include the artifact
    path: Annotated[str, AfterValidator(check_local_path)]  # in that distribution, or a file


class ArtifactFile(KebabModel):
    """One file of an artifact (a GGUF is one file; an OpenVINO IR is several)."""

    path: str  # file name inside the artifact's directory
    url: str | None = None  # https download; None: local-only (``local`` required)
    sha256: Sha256
    size: int = Field(gt=0)
    placeholder: bool = False  # url/sha256/size not verified upstream yet: say so, never hide it
    local: LocalSource | None = None
    shards: tuple[Shard, ...] = ()

    @model_validator(mode="after")
    def _has_a_source(self) -> ArtifactFile:
        # A build (container, remote builder) reaches https URLs and the project directory,
        # never the packager's file system: local files are staged into the project by `make`.
        if self.url is None and self.local is None:
            raise ValueError("give the file a url, or a local: path for a local-only file")
        if self.url is not None and not self.url.startswith(("https://", "http://")):
            raise ValueError(
                f"url {self.url!r} is not an http(s) URL; for a file on this machine leave url "
                "out and give local: {path: ...} (make copies it into the project)"
            )
        if self.url is None and (self.placeholder or self.shards):
            raise ValueError("a local-only file cannot be a placeholder or have shards")
        return self

    @model_validator(mode="after")
    def _shards_cover_file(self) -> ArtifactFile:
        # The Store refuses components over its size limit, so a big file ships in shards.
        if self.size > STORE_COMPONENT_LIMIT and not self.shards:
            raise ValueError(
                f"the file is {self.size} bytes, over the Store's {STORE_COMPONENT_LIMIT}-byte "
                "component limit: list its shards (url, sha256, size of each piece)"
            )
        if self.shards and sum(s.size for s in self.shards) != self.size:
            raise ValueError(
                f"the shards add up to {sum(s.size for s in self.shards)} bytes, "
                f"not the file's size {self.size}"
            )
        return self

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        return check_file_path(v)  # the one rule (snapbuild.manifest.filenames)


class Artifact(KebabModel):
    """Named model weights in one format and quantization."""

    name: str
    format: ArtifactFormat
    quantization: str  # Q4_K_M, Q4_1, Q8_0, F16, int4, int8, fp32...
    files: tuple[ArtifactFile, ...] = Field(min_length=1)
    # weights: a model an engine runs; projector: an encoder (llama.cpp's mmproj) an engine
    # loads beside its weights to read images (or sound) into the language model
    role: ArtifactRole = "weights"
    inputs: tuple[Modality, ...] = ("text",)  # what these files read
    option: str | None = None  # a ladder: the model option (size) these files belong to

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "artifact name")

    @model_validator(mode="after")
    def _inputs(self) -> Artifact:
        if len(set(self.inputs)) != len(self.inputs) or not self.inputs:
            raise ValueError("inputs must list each of text, vision, audio at most once")
        if self.role == "projector" and ("text" in self.inputs or self.format != "gguf"):
            raise ValueError(
                "a projector is a GGUF (llama.cpp's mmproj) that reads vision or audio, not "
                "text: set format: gguf and inputs: [vision]"
            )
        return self

    @property
    def size(self) -> int:
        """Total bytes of all files."""
        return sum(f.size for f in self.files)


class GpuRequirement(KebabModel):
    """A GPU the engine can use. Every field given must hold for one and the same GPU."""

    vendor: GpuVendor | None = None
    device_ids: tuple[str, ...] = ()  # "0x56a2"; empty means any
    min_vram: int | None = Field(default=None, gt=0)  # bytes
    min_compute_capability: str | None = None  # NVIDIA, "7.5"
    gfx_targets: tuple[str, ...] = ()  # AMD, "gfx1030"
    integrated: bool | None = None  # True: iGPU only; False: discrete only


class NpuRequirement(KebabModel):
    """An NPU the engine can use."""

    vendor: str
    driver_loaded: bool = True  # an NPU whose driver is not bound cannot run anything


class Condition(KebabModel):
    """One requirement. Exactly one key is set, so each verdict reads as one reason."""

    architecture: tuple[Architecture, ...] | None = None  # any of these
    cpu_flags: tuple[str, ...] | None = None  # all of these
    x86_64_level: X86Level | None = None  # at least this level
    arm64_features: tuple[str, ...] | None = None  # all of these
    gpu: GpuRequirement | None = None
    npu: NpuRequirement | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Condition:
        given = [k.replace("_", "-") for k, v in self.__dict__.items() if v is not None]
        if len(given) != 1:
            raise ValueError(
                "a condition sets exactly one of architecture, cpu-flags, x86-64-level, "
                f"arm64-features, gpu, npu (got {', '.join(given) or 'none'})"
            )
        return self


class Requirements(KebabModel):
    """all-of: every condition holds; any-of: at least one holds (when any are listed)."""

    all_of: tuple[Condition, ...] = ()
    any_of: tuple[Condition, ...] = ()


class Engine(KebabModel):
    """A runtime running one artifact on one class of device."""

    name: str
    summary: str
    runtime: str  # an id of the runtime catalog (runtimes/catalog.yaml)
    artifact: str | None = None  # an artifact name of this manifest (a ladder: leave it out)
    projector: str | None = None  # a projector artifact loaded beside it (images, sound)
    requires: Requirements = Requirements()
    context_size: int | None = Field(default=None, gt=0)  # default context; None: manifest's
    min_context_size: int | None = Field(default=None, gt=0)
    experimental: bool = False
    # a ladder: the engine runs each option's weights in this quantization (and, for GGUF
    # weights, that option's projector), on the options listed (none listed: every option
    # that has weights in this quantization)
    quantization: str | None = None
    options: tuple[str, ...] = ()

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "engine name")


class ModelOption(KebabModel):
    """One size of a model family: a rung of the ladder a snap picks from.

    ``model`` holds this size's facts (layers, heads, widths, trained context, window, vision);
    what it leaves out comes from the manifest's top-level ``model``, which holds what the family
    shares (kind, vocabulary, chat template). The options are listed best first: that order is
    the quality order the selector ranks by.
    """

    name: str
    title: str | None = None  # e.g. "Gemma 3 12B"; shown by `<snap> models`
    model: ModelFacts

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "option name")


class Manifest(KebabModel):
    """One inference snap: one model, or a ladder of model options (``options``)."""

    schema_version: Literal[1] = 1
    name: str
    title: str
    summary: str = Field(max_length=78)  # the Store's summary limit
    description: str
    # An SPDX expression (Apache-2.0, MIT OR Apache-2.0) or the name of other terms (Gemma):
    # the snap declares `license:` only for SPDX expressions, the only kind snapd accepts.
    license: str
    license_url: Link | None = None  # where the licence terms are published
    version: str = Field(max_length=32)
    # the snap's links (snap.yaml `links:`, shown by `snap info`); optional
    website: Link | None = None
    source_code: Link | None = None
    issues: Link | None = None
    contact: Link | None = None
    base: Literal["core22", "core24"] = "core24"
    architectures: tuple[Architecture, ...] = Field(min_length=1)
    # absent: derived from the name (snapbuild.manifest.ports), stable and distinct per snap
    default_port: int = Field(default=8080, ge=1, le=65535)
    default_context_size: int = Field(default=4096, gt=0)
    # the smallest context worth serving: the selector steps a context down to fit memory,
    # never below this (an engine's own min-context-size wins)
    min_context_size: int = Field(default=512, gt=0)
    model: ModelFacts  # a ladder: what its options share
    artifacts: tuple[Artifact, ...] = Field(min_length=1)
    engines: tuple[Engine, ...] = Field(min_length=1)
    # a ladder: the model options, best first (the ladder's rules: snapbuild.manifest.problems)
    options: tuple[ModelOption, ...] = ()
    # a ladder: the decode speed a larger option must reach on a machine to be chosen over a
    # smaller one (None: snapbuild.manifest.ladder.DEFAULT_MIN_TOKENS_PER_SECOND)
    min_tokens_per_second: float | None = Field(default=None, gt=0)
    # the option this manifest is a single-model view of (snapbuild.manifest.ladder.option_view)
    _view_of: str | None = PrivateAttr(default=None)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v, "snap name")

    @model_validator(mode="before")
    @classmethod
    def _port_from_name(cls, data: Any) -> Any:
        """A manifest without ``default-port`` gets the one derived from its name."""
        named = isinstance(data, dict) and isinstance(data.get("name"), str)
        if named and "default-port" not in data and "default_port" not in data:
            return {**data, "default-port": derived_port(data["name"])}
        return data

    @model_validator(mode="after")
    def _cross_references(self) -> Manifest:
        _unique([a.name for a in self.artifacts], "artifact")
        _unique([e.name for e in self.engines], "engine")
        if self.options:
            return self  # a ladder's references: snapbuild.manifest.problems.ladder_problems
        known = {a.name for a in self.artifacts if a.role == "weights"}
        projectors = {a.name for a in self.artifacts if a.role == "projector"}
        for engine in self.engines:
            if engine.artifact is None:
                raise ValueError(
                    f"engine {engine.name!r} names no artifact; give it artifact: NAME (only a "
                    "manifest with options: picks weights by quantization)"
                )
            if engine.artifact not in known:
                raise ValueError(
                    f"engine {engine.name!r} names artifact {engine.artifact!r}, which is not "
                    f"among the weight artifacts ({', '.join(sorted(known))})"
                )
            if engine.projector is not None and engine.projector not in projectors:
                raise ValueError(
                    f"engine {engine.name!r} names projector {engine.projector!r}, which is not "
                    f"an artifact with role: projector ({', '.join(sorted(projectors)) or 'none'})"
                )
        return self

    @property
    def is_ladder(self) -> bool:
        """Whether this manifest lists model options (a view of one option is not a ladder)."""
        return bool(self.options)

    @property
    def view_of(self) -> str | None:
        """The option this manifest is the single-model view of; None for a manifest as loaded."""
        return self._view_of

    def option(self, name: str) -> ModelOption | None:
        """The model option called ``name``, or None."""
        return next((o for o in self.options if o.name == name), None)

    def artifact(self, name: str) -> Artifact:
        """The artifact called ``name`` (validated to exist for every engine)."""
        return next(a for a in self.artifacts if a.name == name)

    def weights(self, engine: Engine) -> Artifact:
        """The weights ``engine`` runs. A ladder's engines name none until they are resolved
        for an option (:func:`snapbuild.manifest.ladder.option_view`): asking then is a bug."""
        if engine.artifact is None:
            raise ValueError(f"engine {engine.name!r} of a ladder has no weights until resolved")
        return self.artifact(engine.artifact)

    def engine_artifacts(self, engine: Engine) -> tuple[Artifact, ...]:
        """The weights and, when the engine has one, the projector it loads beside them."""
        own = (self.weights(engine),)
        return own + ((self.artifact(engine.projector),) if engine.projector else ())

    def engine_inputs(self, engine: Engine) -> tuple[Modality, ...]:
        """What the engine's files take in together, in the order text, vision, audio."""
        given = {m for a in self.engine_artifacts(engine) for m in a.inputs}
        order: tuple[Modality, ...] = ("text", "vision", "audio")
        return tuple(m for m in order if m in given)

    def engine(self, name: str) -> Engine | None:
        """The engine called ``name``, or None."""
        return next((e for e in self.engines if e.name == name), None)


def _unique(names: list[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ValueError(f"two {what}s are named {name!r}; {what} names must be unique")
        seen.add(name)
