"""Where a llama.cpp component tree keeps its programs and libraries, and how to load them.

One rule for every place that runs llama.cpp: the snap daemon (the component snapd mounts), the
development build (``snapbuild.recipes.native``) and the tests. The catalog's cmake recipe installs
with
``CMAKE_INSTALL_PREFIX=/usr`` and ``CMAKE_INSTALL_LIBDIR=lib``: libraries in ``usr/lib``,
programs in ``usr/bin``. (With ``/`` as the prefix, GNUInstallDirs put some files in ``bin`` and
``lib``, others in ``usr/bin`` and ``usr/lib``, and llama-server found no backend beside it.)
Staged Debian libraries land in ``usr/lib/<multiarch triplet>`` (the recipe's ``library-paths``,
data in the catalog). With ``GGML_BACKEND_DL`` the GGML backends (one CPU module per ISA level)
are modules installed beside the programs, in ``usr/bin``. llama-server finds them next to
itself; the Python binding does not load backends by itself, so :func:`load_binding` loads them.
"""

from __future__ import annotations

import ctypes
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from runtimes.catalog import DEFAULT_LIBRARY_PATHS

LINK_DIR = Path("lib") / "snapbuild-native"  # inside a venv: links to built component trees
ROOT_VAR = "SNAPBUILD_LLAMA_ROOT"  # a component tree to use instead of the venv's link
DEV_COMPONENT = "llamacpp-cpu"


@dataclass(frozen=True)
class ComponentTree:
    """A llama.cpp runtime component's files, as the catalog's recipe installs them."""

    root: Path
    # relative to the root, ``$ARCH_TRIPLET`` expanded: the recipe's ``library-paths``
    library_paths: tuple[str, ...] = DEFAULT_LIBRARY_PATHS

    @property
    def bin_dir(self) -> Path:
        return self.root / "usr" / "bin"

    @property
    def server(self) -> Path:
        return self.bin_dir / "llama-server"

    @property
    def backend_dir(self) -> Path:
        return self.bin_dir

    @property
    def library_dirs(self) -> tuple[Path, ...]:
        """Our own libraries, then staged Debian ones (only the directories that exist)."""
        triplet = multiarch_triplet()
        dirs = [self.root / p.replace("$ARCH_TRIPLET", triplet) for p in self.library_paths]
        return tuple(d for d in dirs if d.is_dir())

    def library_path(self, inherited: str | None = None) -> str:
        """An LD_LIBRARY_PATH value: this tree's library directories before ``inherited``."""
        parts = [str(d) for d in self.library_dirs]
        if inherited:
            parts.append(inherited)
        return os.pathsep.join(parts)

    def problems(self) -> list[str]:
        """What is missing for llama.cpp to run from this tree (empty when complete)."""
        missing = []
        if not self.server.is_file():
            missing.append(f"{self.server} (llama-server)")
        if not any((d / "libllama.so").exists() for d in self.library_dirs):
            missing.append(f"{self.root / 'usr' / 'lib' / 'libllama.so'}")
        if not any(self.backend_dir.glob("libggml-cpu*.so")):
            missing.append(f"{self.backend_dir}/libggml-cpu*.so (GGML CPU backends)")
        return missing


def multiarch_triplet() -> str:
    """Debian's multiarch triplet for this interpreter (x86_64-linux-gnu, aarch64-linux-gnu)."""
    return str(sysconfig.get_config_var("MULTIARCH") or f"{os.uname().machine}-linux-gnu")


def component_root(component: str = DEV_COMPONENT) -> Path | None:
    """The llama.cpp tree to run: $SNAPBUILD_LLAMA_ROOT (the snap daemon sets it to the engine's
    component), else the one a development install built and linked into this venv."""
    override = os.environ.get(ROOT_VAR)
    if override:
        return Path(override)
    link = Path(sys.prefix) / LINK_DIR / component
    return link.resolve() if link.exists() else None


def load_binding(tree: ComponentTree) -> None:
    """Make llama-cpp-python use this tree's libllama and load its GGML backends.

    Must run before ``import llama_cpp`` (the binding reads ``LLAMA_CPP_LIB_PATH`` at import).
    The binding never calls ``ggml_backend_load_all``; with ``GGML_BACKEND_DL`` llama.cpp then
    has no backend at all ("no backends are loaded"), so this loads them from the tree.
    """
    lib_dir = next((d for d in tree.library_dirs if (d / "libllama.so").exists()), None)
    if lib_dir is None:
        return
    os.environ["LLAMA_CPP_LIB_PATH"] = str(lib_dir)
    # Installed libraries carry no RUNPATH: load the dependencies first, by path, so that
    # libllama's DT_NEEDED entries are already satisfied when the binding opens it. Locally
    # (RTLD_LOCAL): exported globally, ggml's symbols crash OpenVINO in the same process.
    ggml = None
    for name in ("libggml-base.so", "libggml.so"):
        ggml = ctypes.CDLL(str(lib_dir / name), mode=os.RTLD_LOCAL)
    assert ggml is not None
    loader = ggml.ggml_backend_load_all_from_path
    loader.argtypes = [ctypes.c_char_p]
    loader(str(tree.backend_dir).encode())


def import_llama_cpp() -> ModuleType:
    """``llama_cpp``, bound to the component tree's libllama when there is one.

    The binding is installed without its own copy of llama.cpp (``-DLLAMA_BUILD=OFF``, as in the
    snap), so the tree is what it runs on, in the snap and on a development machine alike.
    """
    if "llama_cpp" not in sys.modules:
        root = component_root()
        if root is not None:
            load_binding(ComponentTree(root))
    try:
        import llama_cpp
    except (OSError, RuntimeError, FileNotFoundError) as exc:
        raise ImportError(
            f"llama-cpp-python cannot load libllama ({exc}); build the llama.cpp runtime with "
            "`make install` (or `python -m snapbuild.recipes.native`), or set "
            f"{ROOT_VAR} to a component tree"
        ) from exc
    return llama_cpp
