"""Waiting for the snap's server to answer, saying what it is doing meanwhile.

A first start may join split weights and load a large model, so the wait is long; the daemon
notes its phase in ``$SNAP_DATA/daemon.json``, and echoing that (and the elapsed time every few
seconds) keeps a slow load from looking like a hang. A service that dies, or that answers why
it cannot serve (a 503 with a reason: the weights do not load, nothing fits), fails the wait at
once, with the tail of its log, instead of running out the clock.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from snapbuild.trial.sandbox import Trial, TrialError

HEALTH_TIMEOUT_S = 180.0
PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class Watched:
    """What a wait watches besides the URL: whether the service has stopped, its log, and the
    file where the daemon notes its phase (``$SNAP_DATA/daemon.json``)."""

    stopped: Callable[[], bool]
    log: Callable[[], str]
    note: Path


def watched_trial(trial: Trial) -> Watched:
    """The development trial's service, through its snapctl stand-in."""
    return Watched(
        stopped=lambda: "inactive" in trial.snapctl("services").stdout,
        log=trial.log,
        note=Path(trial.env["SNAP_DATA"]) / "daemon.json",
    )


def wait_healthy(
    trial: Trial | Watched,
    url: str,
    timeout: float = HEALTH_TIMEOUT_S,
    echo: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Poll /health until 200; fail early, with the log, if the service dies or answers
    that it cannot serve (its 503's reason, detail and resolution). ``echo`` hears
    what the daemon is doing (waiting for components, preparing, loading) as it changes, and
    the elapsed time every few seconds, so a slow load is not a silent wait."""
    watched = trial if isinstance(trial, Watched) else watched_trial(trial)
    start = time.monotonic()
    deadline = start + timeout
    said = ("", 0.0)
    while time.monotonic() < deadline:
        if echo is not None:
            said = _progress(watched.note, echo, said, time.monotonic() - start)
        with contextlib.suppress(requests.RequestException, ValueError):
            resp = requests.get(url, timeout=2)
            body: dict[str, Any] = resp.json()
            if resp.status_code == 200:
                return body
            if body.get("reason") not in (None, "restarting"):  # it answers why it cannot serve
                raise TrialError(
                    f"the server cannot serve the model ({body['reason']}): {body.get('detail')}",
                    details=tail(watched.log()),
                    resolution=body.get("resolution"),
                )
        if watched.stopped():
            raise TrialError(
                "the server stopped before it was healthy",
                details=tail(watched.log()),
                resolution="Read the log above; the snap's `status` command says more.",
            )
        time.sleep(0.3)
    raise TrialError(
        f"the server did not become healthy within {timeout:.0f}s at {url}",
        details=tail(watched.log()),
    )


def _progress(
    note: Path, echo: Callable[[str], None], said: tuple[str, float], elapsed: float
) -> tuple[str, float]:
    """Echo the daemon's phase when it changes (or every few seconds); returns what was said."""
    try:
        data = json.loads(note.read_text(encoding="utf-8"))
        text = f"{data['phase']}: {data['message']}"
    except (OSError, ValueError, KeyError, TypeError):
        text = "starting the server"
    if text != said[0] or elapsed - said[1] >= PROGRESS_EVERY_S:
        echo(f"  [{elapsed:4.1f}s] {text}")
        return text, elapsed
    return said


def tail(text: str, lines: int = 20) -> str:
    """The last ``lines`` lines of a log, enough to show why a service died."""
    return "\n".join(text.splitlines()[-lines:])
