"""The runtime catalog (``runtimes/catalog.yaml``) as typed data.

Manifests name runtimes by id; the selector reads their device class, the server how to serve
them (``serving``, and the ``adapter`` where that is in-process), the builder their build
recipe. Keeping this as one table means adding a runtime is a data change that every part sees
at once.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field

from snapcommon.model import KebabModel

CATALOG_PATH = Path(__file__).with_name("catalog.yaml")

Capability = Literal["chat", "completion", "embeddings"]
DeviceClass = Literal["cpu", "gpu", "npu"]


# Where a runtime component's shared libraries are, relative to the component: what the cmake
# part installs (CMAKE_INSTALL_PREFIX=/usr, CMAKE_INSTALL_LIBDIR=lib) and what staged Ubuntu
# packages bring.
# $ARCH_TRIPLET is the snap's environment variable (x86_64-linux-gnu...).
DEFAULT_LIBRARY_PATHS = ("usr/lib", "usr/lib/$ARCH_TRIPLET")


class NativeBuild(KebabModel):
    """A native library built at a pinned upstream commit with snapcraft's cmake plugin."""

    source: str  # git URL of the upstream project
    # a full 40-character commit, never a branch (builds must be reproducible) nor an
    # abbreviation: craft-parts can fetch only a full hash shallowly (`source-depth`)
    source_commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    # `source-depth` of the part: 1 fetches that one commit, not the project's whole history
    # (craft-parts' advice for large repositories); 0 clones everything
    source_depth: int = Field(default=0, ge=0)
    # a PyPI sdist that vendors this source at this commit: where builds that cannot reach the
    # git host (development machines, CI) take the very same tree (snapbuild.recipes.native)
    vendored_by: str | None = None
    cmake_parameters: tuple[str, ...] = ()
    # snapcraft `package-repositories` entries the packages below come from (besides Ubuntu's)
    package_repositories: tuple[dict[str, Any], ...] = ()
    build_packages: tuple[str, ...] = ()
    stage_packages: tuple[str, ...] = ()
    library_paths: tuple[str, ...] = DEFAULT_LIBRARY_PATHS
    # files the install step writes that the component must not ship (paths relative to the
    # install directory, no globs); the part removes them after `craftctl default`
    remove_after_install: tuple[str, ...] = ()


class PythonBuild(KebabModel):
    """Python packages installed with snapcraft's python plugin, each pinned to one version."""

    python_packages: tuple[str, ...] = Field(min_length=1)
    build_environment: dict[str, str] = Field(default_factory=dict)
    build_packages: tuple[str, ...] = ()
    stage_packages: tuple[str, ...] = ()


class BuildRecipe(KebabModel):
    """How the builder turns a runtime into the parts of its snap component."""

    native: NativeBuild | None = None
    python: PythonBuild | None = None


class Variant(KebabModel):
    """A named group of engines built into one snap (``snapbuild make --variant NAME``)."""

    name: str
    summary: str
    devices: tuple[DeviceClass, ...] = Field(min_length=1)
    vendors: tuple[str, ...] = ()  # for gpu/npu runtimes: keep those driving one of these
    cpu_fallback: bool = False  # also keep the CPU engines


class Offload(KebabModel):
    """How llama-server puts a GPU runtime's layers on the device the selector chose."""

    backend: Literal["cuda", "vulkan", "hip"]  # the module usr/bin/libggml-<backend>.so
    device_name: str  # llama.cpp names the backend's devices <device-name>0, 1...
    visible_devices: str  # the backend's variable restricting it to some devices
    device_order: Literal["pci", "vulkan"]  # what that variable counts
    environment: dict[str, str] = Field(default_factory=dict)  # set with it

    @property
    def module(self) -> str:
        """The backend module's file name in the component's ``usr/bin``."""
        return f"libggml-{self.backend}.so"


class RuntimeEntry(KebabModel):
    """One runtime id: a family (llama.cpp, openvino, onnxruntime) on one device class."""

    id: str
    family: Literal["llama.cpp", "openvino", "onnxruntime"]
    device: DeviceClass
    gpu_vendors: tuple[str, ...] = ()
    npu_vendors: tuple[str, ...] = ()
    formats: tuple[Literal["gguf", "openvino-ir", "onnx"], ...]
    # the in-process adapter, "module:Class": what serves the runtime where ``serving`` is
    # in-process; a llama-server entry's is what switching it to in-process would serve (and
    # what tests load directly)
    adapter: str
    # how the gateway serves it: the adapter in its own process, or llama.cpp's llama-server
    # as a supervised child (continuous batching over parallel slots); the selector plans
    # llama-server's slots only for the latter
    serving: Literal["in-process", "llama-server"] = "in-process"
    capabilities: tuple[Capability, ...]
    # what the runtime can take in on the devices it drives (snapbuild.selection.vision ranks by it)
    inputs: tuple[Literal["text", "vision", "audio"], ...] = ("text",)
    component: str  # the snap component holding this runtime build
    interfaces: tuple[str, ...] = ()  # snap interfaces the runtime needs beyond the base set
    extensions: tuple[Literal["gpu"], ...] = ()  # snapcraft extensions its apps need
    offload: Offload | None = None  # llama.cpp GPU runtimes: how layers reach the device
    architectures: tuple[str, ...] = ()  # where it builds and runs; empty: everywhere
    build: BuildRecipe | None = None  # the builder's part recipe (snapbuild.project)

    def supports(self, architecture: str) -> bool:
        """Whether this runtime builds and runs on ``architecture``."""
        return not self.architectures or architecture in self.architectures

    @property
    def vendors(self) -> tuple[str, ...]:
        """The GPU or NPU vendors this runtime drives (empty for CPU runtimes)."""
        return self.npu_vendors if self.device == "npu" else self.gpu_vendors


class RuntimeCatalog(KebabModel):
    """The whole table."""

    schema_version: Literal[1] = 1
    runtimes: tuple[RuntimeEntry, ...]
    plug_definitions: dict[str, dict[str, str]] = Field(default_factory=dict)
    variants: tuple[Variant, ...] = ()

    def get(self, runtime_id: str) -> RuntimeEntry | None:
        """The entry for ``runtime_id``, or None when the id is unknown."""
        return next((r for r in self.runtimes if r.id == runtime_id), None)

    @property
    def ids(self) -> tuple[str, ...]:
        """Every known runtime id, in table order."""
        return tuple(r.id for r in self.runtimes)

    def variant(self, name: str) -> Variant | None:
        """The build variant called ``name``, or None."""
        return next((v for v in self.variants if v.name == name), None)


@cache
def load_catalog(path: Path = CATALOG_PATH) -> RuntimeCatalog:
    """Load and validate the catalog (cached: it is read-only data)."""
    with path.open(encoding="utf-8") as fh:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present
        return RuntimeCatalog.model_validate(yaml.load(fh, Loader=loader))
