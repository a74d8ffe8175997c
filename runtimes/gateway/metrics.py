"""What the gateway measures, in Prometheus' text format (``GET /metrics``), for every engine.

The gateway times what clients see (time to first token, gaps between tokens, status codes),
whatever engine answers. Engines add their own live figures as gauges: llama-server's busy
slots, queue and KV-cache use (read from its ``/metrics`` and ``/slots``), or an in-process
adapter's ``metrics() -> dict[str, float]`` when it has one. Small on purpose: counters,
gauges and fixed-bucket histograms are all the API needs, and no client library is required.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

PREFIX = "snapbuild_"
# seconds: first tokens arrive in tens of milliseconds on a GPU, seconds on a loaded CPU
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
NAME_RE = re.compile(r"[^a-zA-Z0-9_]")
Labels = tuple[tuple[str, str], ...]


@dataclass
class Histogram:
    """Cumulative buckets, sum and count, as Prometheus expects."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        """Add one observation."""
        self.total += value
        self.count += 1
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1


@dataclass
class Metrics:
    """The registry one gateway feeds; ``sources`` add engine gauges when scraped."""

    counters: dict[tuple[str, Labels], float] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    help: dict[str, str] = field(default_factory=dict)
    sources: list[Callable[[], Mapping[str, float]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    generated_tokens: int = 0
    started: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.histograms["time_to_first_token_seconds"] = Histogram(TTFT_BUCKETS)
        self.histograms["inter_token_latency_seconds"] = Histogram(ITL_BUCKETS)
        self.help.update(
            {
                "requests_total": "API requests answered, by endpoint and HTTP status",
                "time_to_first_token_seconds": "From request to the first generated text",
                "inter_token_latency_seconds": "Gap between consecutive streamed pieces",
                "generated_tokens_total": "Completion tokens generated",
                "tokens_per_second": "Completion tokens per second over the last scrape window",
                "requests_in_flight": "Generation requests being answered now",
                "process_cpu_seconds_total": "CPU seconds (user and system, every thread) of "
                "the gateway process, its in-process engine included (not llama-server's)",
            }
        )
        self.gauges["requests_in_flight"] = 0.0
        self._window = (time.monotonic(), 0)

    def count_request(self, endpoint: str, status: int) -> None:
        """One answered request."""
        key = ("requests_total", (("endpoint", endpoint), ("status", str(status))))
        with self.lock:
            self.counters[key] = self.counters.get(key, 0.0) + 1

    def observe(self, name: str, value: float) -> None:
        """One observation of a histogram (``time_to_first_token_seconds``...)."""
        with self.lock:
            self.histograms[name].observe(value)

    def add_tokens(self, n: int) -> None:
        """Completion tokens generated."""
        with self.lock:
            self.generated_tokens += n

    def in_flight(self, delta: int) -> None:
        """A generation request began (+1) or ended (-1)."""
        with self.lock:
            self.gauges["requests_in_flight"] += delta

    def tokens_per_second(self) -> float:
        """Generated tokens per second since the previous call (or since start)."""
        now = time.monotonic()
        with self.lock:
            then, before = self._window
            self._window = (now, self.generated_tokens)
            elapsed = now - then
            return (self.generated_tokens - before) / elapsed if elapsed > 0 else 0.0

    def live(self) -> dict[str, float]:
        """The engine's gauges now (what ``<snap> status`` shows)."""
        figures: dict[str, float] = {}
        for source in self.sources:
            try:
                figures.update(source())
            except Exception:  # a failing source must not break the scrape
                continue
        return figures

    def render(self, extra: Mapping[str, float] | None = None) -> str:
        """The Prometheus text exposition of everything."""
        lines: list[str] = []
        with self.lock:
            counters = dict(self.counters)
            histograms = {
                k: (h.buckets, list(h.counts), h.total, h.count) for k, h in self.histograms.items()
            }
            gauges = dict(self.gauges)
            tokens = self.generated_tokens
        _family(lines, "requests_total", "counter", self.help)
        for (name, labels), value in sorted(counters.items()):
            lines.append(f"{PREFIX}{name}{_labels(labels)} {_num(value)}")
        _family(lines, "generated_tokens_total", "counter", self.help)
        lines.append(f"{PREFIX}generated_tokens_total {tokens}")
        # what the requests cost the server, whatever the wall clock does on a shared machine
        _family(lines, "process_cpu_seconds_total", "counter", self.help)
        lines.append(f"{PREFIX}process_cpu_seconds_total {time.process_time():.6f}")
        for name, (bounds, counts, total, count) in histograms.items():
            _family(lines, name, "histogram", self.help)
            for bound, n in zip(bounds, counts, strict=True):
                lines.append(f'{PREFIX}{name}_bucket{{le="{_num(bound)}"}} {n}')
            lines.append(f'{PREFIX}{name}_bucket{{le="+Inf"}} {count}')
            lines.append(f"{PREFIX}{name}_sum {_num(total)}")
            lines.append(f"{PREFIX}{name}_count {count}")
        gauges["tokens_per_second"] = self.tokens_per_second()
        gauges.update(extra or {})
        gauges.update(self.live())
        for name, value in sorted(gauges.items()):
            clean = NAME_RE.sub("_", name)
            _family(lines, clean, "gauge", self.help)
            lines.append(f"{PREFIX}{clean} {_num(value)}")
        return "\n".join(lines) + "\n"


def _family(lines: list[str], name: str, kind: str, help: Mapping[str, str]) -> None:
    lines.append(f"# HELP {PREFIX}{name} {help.get(name, name.replace('_', ' '))}")
    lines.append(f"# TYPE {PREFIX}{name} {kind}")


def _labels(labels: Labels) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return "{" + inner + "}" if inner else ""


def _num(value: float) -> str:
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return "+Inf" if value > 0 else ("-Inf" if value < 0 else "NaN")
    return f"{value:g}" if isinstance(value, float) else str(value)


def parse_prometheus(text: str, prefix: str = "llamacpp:") -> dict[str, float]:
    """Samples without labels whose name starts with ``prefix``, prefix removed (llama-server's
    ``/metrics``)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        name, _, value = line.partition(" ")
        if "{" in name:
            continue
        try:
            out[name[len(prefix) :]] = float(value)
        except ValueError:
            continue
    return out


def slot_figures(slots: Iterable[Mapping[str, object]]) -> dict[str, float]:
    """Busy slots and KV-cache use from llama-server's ``/slots``: cells holding tokens (the
    prompt kept for reuse plus what was generated) over all cells."""
    total = used = busy = count = 0
    for slot in slots:
        count += 1
        n_ctx = _int(slot.get("n_ctx"))
        total += n_ctx
        busy += 1 if slot.get("is_processing") else 0
        held = _int(slot.get("n_prompt_tokens"))
        nxt = slot.get("next_token")
        if isinstance(nxt, list) and nxt and isinstance(nxt[0], dict):
            held += _int(nxt[0].get("n_decoded"))
        used += min(held, n_ctx)
    return {
        "slots_total": float(count),
        "slots_busy": float(busy),
        "kv_cache_used_cells": float(used),
        "kv_cache_usage_ratio": used / total if total else 0.0,
    }


def _int(value: object) -> int:
    return int(value) if isinstance(value, (int, float)) else 0
