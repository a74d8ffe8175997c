"""The snap's settings (port, host, context-size, engine, engine-enabled, model, env.*) and their
rules.

A change is validated as a whole before anything is written, so a rejected ``set`` leaves the
configuration exactly as it was. ``env.*`` keys reach the runtime as environment variables;
snapd only allows lowercase option names, so ``env.omp-num-threads`` is ``OMP_NUM_THREADS`` (the
CLI accepts either spelling and stores the snapd one).
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from snapbuild.manifest.ladder import view_for
from snapbuild.manifest.model import Manifest
from snapbuild.selection.decision import Candidate
from snapcommon.errors import UsageError

KEYS = (
    "port",
    "host",
    "context-size",
    "engine",
    "engine-enabled",
    "cors-origins",
    "remote-images",
    "model",
)
BOOLEANS = ("true", "false")
ORIGIN_RE = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(:\d{1,5})?$")
DEFAULT_HOST = "127.0.0.1"
AUTO = "auto"
HOSTNAME_RE = re.compile(r"^(?=.{1,253}$)([A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?)+$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
ENV_KEY_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
# Variables the snap's own environment owns: snapd's (SNAP*, HOME, XDG_RUNTIME_DIR, TMPDIR), the
# loader's and Python's (how the daemon and its engine find their code), and snapbuild's
# (SNAPBUILD_*, LLAMA_CPP_LIB_PATH). Set through env.*, they would break the service, not tune it.
RESERVED_ENV = frozenset(
    {
        "PATH",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "LD_AUDIT",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "HOME",
        "XDG_RUNTIME_DIR",
        "TMPDIR",
        "LLAMA_CPP_LIB_PATH",
    }
)
RESERVED_ENV_PREFIX = "SNAP"  # SNAP, SNAP_*, SNAPCTL_*, SNAPBUILD_*


def is_reserved(name: str) -> bool:
    """Whether the environment variable ``name`` belongs to the snap, not to the runtime."""
    return name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIX)


def runtime_env(env: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """(the variables the runtime gets, the reserved names left out): a value stored before
    this rule existed, or by snapd without the configure hook, never reaches the process."""
    return {k: v for k, v in env.items() if not is_reserved(k)}, sorted(filter(is_reserved, env))


@dataclass(frozen=True)
class Settings:
    """The effective settings: stored values over defaults."""

    port: int
    host: str
    context_size: int
    engine: str  # an engine name, or "auto"
    env: dict[str, str] = field(default_factory=dict)  # runtime variable -> value
    # browser origins allowed to call the API, comma-separated ("*": any); empty: loopback only
    cors_origins: str = ""
    # "true": the server fetches http(s) image URLs itself (bounded); default: data: URLs only
    remote_images: str = "false"
    # "false": the operator switched the engine off; the server keeps the port and answers 503
    engine_enabled: str = "true"
    # a model ladder: the option (size) to run, or "auto"; None for a snap with one model
    model: str | None = None

    def origins(self) -> list[str]:
        """``cors_origins`` as a list (empty: the server's loopback default)."""
        return [o.strip() for o in self.cors_origins.split(",") if o.strip()]

    def to_data(self) -> dict[str, Any]:
        """JSON-ready, with snapd's key names."""
        return {
            "port": self.port,
            "host": self.host,
            "context-size": self.context_size,
            "engine": self.engine,
            "cors-origins": self.cors_origins,
            "remote-images": self.remote_images,
            "engine-enabled": self.engine_enabled,
            **({"model": self.model} if self.model is not None else {}),
            "env": dict(sorted(self.env.items())),
        }


def env_option_to_var(option: str) -> str:
    """``omp-num-threads`` -> ``OMP_NUM_THREADS``."""
    return option.upper().replace("-", "_")


def normalize_key(key: str) -> str:
    """Accept ``context_size``, ``env.OMP_NUM_THREADS``...; return the snapd option name."""
    key = key.strip()
    if key.startswith("env."):
        name = key[4:]
        if not ENV_NAME_RE.match(name) and not ENV_KEY_RE.match(name):
            raise UsageError(
                f"{key!r} does not name an environment variable",
                resolution="Use env.NAME with letters, digits and underscores, e.g. "
                "env.OMP_NUM_THREADS=4.",
            )
        return "env." + name.lower().replace("_", "-")
    normal = key.lower().replace("_", "-")
    if normal not in KEYS:
        raise UsageError(
            f"unknown setting {key!r}",
            resolution=f"Settings are {', '.join(KEYS)} and env.NAME.",
        )
    return normal


def parse_assignment(text: str) -> tuple[str, Any]:
    """``port=8081`` -> ("port", 8081); values are typed by key, not guessed."""
    key, sep, raw = text.partition("=")
    if not sep:
        raise UsageError(f"{text!r} is not key=value", resolution="Write e.g. `set port=8081`.")
    key = normalize_key(key)
    raw = raw.strip()
    if key in {"port", "context-size"}:
        try:
            return key, int(raw)
        except ValueError:
            raise UsageError(
                f"{key} must be a whole number, not {raw!r}",
                resolution=f"Write e.g. `set {key}={8080 if key == 'port' else 4096}`.",
            ) from None
    return key, raw


def flatten(stored: Mapping[str, Any]) -> dict[str, Any]:
    """snapctl's nested ``{"env": {...}}`` to flat ``{"env.x": ...}`` keys."""
    flat: dict[str, Any] = {}
    for key, value in stored.items():
        if key == "env" and isinstance(value, dict):
            flat.update({f"env.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    return flat


def effective(
    stored: Mapping[str, Any], manifest: Manifest, default_context: int | None
) -> Settings:
    """Stored (flat) values over the manifest's and the decision's defaults. A snap with one
    model has no ``model`` setting: a stored one is kept, for :func:`validate` to refuse."""
    env = {
        env_option_to_var(k[4:]): v if isinstance(v, str) else json.dumps(v)
        for k, v in stored.items()
        if k.startswith("env.")
    }
    return Settings(
        port=_as_int(stored.get("port"), manifest.default_port),
        host=str(stored.get("host") or DEFAULT_HOST),
        context_size=_as_int(
            stored.get("context-size"), default_context or manifest.default_context_size
        ),
        engine=str(stored.get("engine") or AUTO),
        env=env,
        cors_origins=str(stored.get("cors-origins") or ""),
        remote_images=str(stored.get("remote-images") or "false").lower(),
        engine_enabled=str(stored.get("engine-enabled", "true")).lower(),
        model=str(stored.get("model") or AUTO) if manifest.is_ladder or "model" in stored else None,
    )


def _as_int(value: Any, default: int) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1  # fails validation with a message naming the stored value


def port_is_free(host: str, port: int) -> bool | None:
    """Whether a server could listen on host:port now; None when this process may not open a
    network socket to find out (a hook without the ``network-bind`` plug gets EACCES under
    AppArmor): then only the daemon, which has the plug, can tell, and it says so in status."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except PermissionError:
        return None
    with sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except PermissionError:
            return None
        except OSError:
            return False
    return True


def max_context(candidate: Candidate | None, manifest: Manifest) -> int | None:
    """The largest context the engine fits in memory here (linear in the KV cache), if known."""
    limits = []
    if manifest.model.context_length:
        limits.append(manifest.model.context_length)
    mem = candidate.memory if candidate else None
    if mem and mem.available and mem.context_size:
        base = mem.weights + mem.kv_cache + mem.compute + mem.overhead
        headroom = mem.required / base if base else 1.0
        per_token = mem.kv_cache / mem.context_size
        fixed = (base - mem.kv_cache) * headroom
        if per_token > 0:
            limits.append(max(0, int((mem.available - fixed) / (per_token * headroom))))
    return min(limits) if limits else None


def min_context(engine: str | None, manifest: Manifest) -> int:
    """The smallest context the manifest allows for ``engine`` (its ``min-context-size``, else
    the model's), the same floor the selector never goes below; at most the trained length."""
    entry = manifest.engine(engine) if engine else None
    low = (entry.min_context_size if entry else None) or manifest.min_context_size
    trained = manifest.model.context_length
    return min(low, trained) if trained else low


def validate(
    settings: Settings,
    manifest: Manifest,
    candidate: Candidate | None,
    *,
    own_port: int | None = None,
) -> list[str]:
    """Every reason the settings cannot be used; empty when they can.

    ``own_port`` is the port our running server holds, which is busy but not a conflict.
    ``candidate`` is the selector's verdict for the engine that will run (a ladder's contexts
    are those of the option it runs).
    """
    problems: list[str] = []
    served = view_for(manifest, candidate.option if candidate else None)
    host_ok = _host_ok(settings.host)
    if not host_ok:
        problems.append(
            f"host {settings.host!r} is not an IP address or host name "
            "(use 127.0.0.1 for this machine only, 0.0.0.0 for every interface)"
        )
    if not 1 <= settings.port <= 65535:
        problems.append(f"port {settings.port} is out of range: use 1-65535")
    elif (
        host_ok
        and settings.port != own_port
        and port_is_free(settings.host, settings.port) is False
    ):
        problems.append(
            f"port {settings.port} is busy on {settings.host}: another program listens there "
            "(pick a free port, e.g. `set port=" + str(_free_port_near(settings)) + "`)"
        )
    if settings.engine != AUTO and manifest.engine(settings.engine) is None:
        names = ", ".join(e.name for e in manifest.engines)
        problems.append(f"engine {settings.engine!r} is not in this snap (engines: {names}, auto)")
    problems += _model_problems(settings.model, manifest)
    if settings.context_size <= 0:
        problems.append(
            f"context-size must be a positive whole number, not {settings.context_size}"
        )
    else:
        pinned = settings.engine if settings.engine != AUTO else None
        floor = min_context(candidate.engine if candidate else pinned, served)
        limit = max_context(candidate, served)
        if settings.context_size < floor:
            problems.append(
                f"context-size {settings.context_size} is below the smallest this model is "
                f"served with, {floor} tokens (min-context-size in its manifest)"
            )
        elif limit is not None and settings.context_size > limit:
            problems.append(
                f"context-size {settings.context_size} does not fit: the most this engine fits "
                f"here is {limit} tokens"
            )
    for origin in settings.origins():
        if origin != "*" and not ORIGIN_RE.match(origin):
            problems.append(
                f"cors-origins: {origin!r} is not an origin (scheme://host[:port], e.g. "
                "http://localhost:3000, or * for any)"
            )
    if settings.remote_images not in BOOLEANS:
        problems.append(
            f"remote-images must be true or false, not {settings.remote_images!r} (true lets the "
            "server fetch http(s) image URLs that clients send)"
        )
    if settings.engine_enabled not in BOOLEANS:
        problems.append(
            f"engine-enabled must be true or false, not {settings.engine_enabled!r} (false stops "
            "the engine; the API keeps its port and answers 503 saying so)"
        )
    for name in settings.env:
        if not ENV_NAME_RE.match(name):
            problems.append(f"env.{name} is not a valid environment variable name")
        elif is_reserved(name):
            problems.append(
                f"env.{name} belongs to the snap's own environment (PATH, LD_*, PYTHON*, HOME, "
                f"TMPDIR, SNAP*...): use env.* for the runtime's variables, such as "
                f"OMP_NUM_THREADS or GGML_*; `unset env.{name}` if it is stored"
            )
    return problems


def _model_problems(model: str | None, manifest: Manifest) -> list[str]:
    """A ``model`` that names no option of this snap (or any, in a snap with one model)."""
    if model is None or model == AUTO or manifest.option(model) is not None:
        return []
    if not manifest.is_ladder:
        return [f"model {model!r}: this snap holds one model; `unset model`"]
    names = ", ".join(o.name for o in manifest.options)
    return [f"model {model!r} is not in this snap (models: {names}, auto)"]


def _host_ok(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(HOSTNAME_RE.match(host)) and not host.replace(".", "").isdigit()


def _free_port_near(settings: Settings) -> int:
    for port in range(settings.port + 1, min(settings.port + 100, 65536)):
        if port_is_free(settings.host, port):
            return port
    return settings.port + 1


def _busy(host: str, port: int) -> bool:
    """Known to be taken (not merely unknown: a hook may not be able to check)."""
    return port_is_free(host, port) is False


def first_free_port(host: str, start: int) -> int:
    """``start`` or the next port after it that is free (the install hook's default port);
    ``start`` when ports cannot be checked from here."""
    for port in range(start, min(start + 100, 65536)):
        if port_is_free(host, port) is not False:
            return port
    return start
