"""Live figures of the running server for `<snap> status`: its /health and /metrics.

Read over loopback with a short timeout, so `status` stays quick when the server is down or
busy; a server that does not answer simply has no live figures.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

TIMEOUT_S = 2.0
GAUGES = (
    "slots_busy",
    "slots_total",
    "queue_depth",
    "kv_cache_usage_ratio",
    "requests_in_flight",
    "generated_tokens_total",
    "child_restarts",
)


def _get(url: str) -> tuple[int, bytes] | None:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:  # noqa: S310 - loopback
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (OSError, ValueError):
        return None


def live_status(host: str, port: int) -> dict[str, Any] | None:
    """The server's health (status, detail, child process) and gauges; None if it is down."""
    where = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    base = f"http://[{where}]:{port}" if ":" in where else f"http://{where}:{port}"
    health = _get(f"{base}/health")
    if health is None:
        return None
    try:
        body = json.loads(health[1])
    except ValueError:
        return None
    out: dict[str, Any] = {
        "status": body.get("status"),
        "detail": body.get("detail"),
        "child": (body.get("runtime_info") or {}).get("child"),
        "generations": body.get("generations"),
        "figures": {},
    }
    metrics = _get(f"{base}/metrics")
    if metrics is not None and metrics[0] == 200:
        figures = {}
        for line in metrics[1].decode("utf-8", "replace").splitlines():
            name, _, value = line.partition(" ")
            short = name.removeprefix("snapbuild_")
            if short in GAUGES:
                try:
                    figures[short] = float(value)
                except ValueError:
                    continue
        out["figures"] = figures
    return out


def live_lines(live: dict[str, Any] | None) -> list[str]:
    """`status` lines for the live figures."""
    if live is None:
        return ["live:         the server does not answer"]
    lines = [f"live:         {live['status']}" + (f" ({live['detail']})" if live["detail"] else "")]
    f = live.get("figures") or {}
    if f:
        lines.append(
            f"  slots busy {f.get('slots_busy', 0):g}/{f.get('slots_total', 0):g}, queued "
            f"{f.get('queue_depth', 0):g}, KV cache {100 * f.get('kv_cache_usage_ratio', 0):.0f}% "
            f"used, {f.get('generated_tokens_total', 0):g} tokens generated"
        )
    child = live.get("child")
    if child:
        lines.append(
            f"  llama-server pid {child.get('pid')}, {child.get('restarts', 0)} restarts"
            + (f", last: {child['last-exit']}" if child.get("last-exit") else "")
        )
    return lines
