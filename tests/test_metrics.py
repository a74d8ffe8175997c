"""The metrics registry: Prometheus text exposition, histograms, engine gauges, and the
parsers for llama-server's /metrics and /slots."""

from __future__ import annotations

from runtimes.gateway.metrics import Metrics, parse_prometheus, slot_figures


def test_render_is_prometheus_text() -> None:
    metrics = Metrics()
    metrics.count_request("/v1/chat/completions", 200)
    metrics.count_request("/v1/chat/completions", 200)
    metrics.count_request("/v1/embeddings", 400)
    for value in (0.02, 0.2, 3.0):
        metrics.observe("time_to_first_token_seconds", value)
    metrics.add_tokens(12)
    metrics.sources.append(lambda: {"slots_busy": 2.0, "kv_cache_usage_ratio": 0.25})
    metrics.sources.append(lambda: 1 / 0)  # type: ignore[arg-type,return-value]  # ignored
    text = metrics.render({"queue_depth": 1.0})
    lines = text.splitlines()
    assert 'snapbuild_requests_total{endpoint="/v1/chat/completions",status="200"} 2' in lines
    assert 'snapbuild_requests_total{endpoint="/v1/embeddings",status="400"} 1' in lines
    assert "# TYPE snapbuild_time_to_first_token_seconds histogram" in lines
    buckets = [
        line for line in lines if line.startswith("snapbuild_time_to_first_token_seconds_bucket")
    ]
    assert buckets[:3] == [
        'snapbuild_time_to_first_token_seconds_bucket{le="0.01"} 0',
        'snapbuild_time_to_first_token_seconds_bucket{le="0.025"} 1',
        'snapbuild_time_to_first_token_seconds_bucket{le="0.05"} 1',
    ]
    assert buckets[-1] == 'snapbuild_time_to_first_token_seconds_bucket{le="+Inf"} 3'
    assert "snapbuild_time_to_first_token_seconds_count 3" in lines
    assert "snapbuild_generated_tokens_total 12" in lines
    cpu = [line for line in lines if line.startswith("snapbuild_process_cpu_seconds_total ")]
    assert len(cpu) == 1 and float(cpu[0].split()[1]) > 0
    assert "# TYPE snapbuild_process_cpu_seconds_total counter" in lines
    assert {"snapbuild_slots_busy 2", "snapbuild_kv_cache_usage_ratio 0.25"} <= set(lines)
    assert "snapbuild_queue_depth 1" in lines and "snapbuild_requests_in_flight 0" in lines
    # every sample's family is declared once, before it
    declared = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert len(declared) == len(set(declared))


def test_llama_server_parsers() -> None:
    text = (
        "# HELP llamacpp:requests_deferred Number of requests deferred\n"
        "# TYPE llamacpp:requests_deferred gauge\n"
        "llamacpp:requests_deferred 3\n"
        "llamacpp:predicted_tokens_seconds 41.5\n"
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 0\n'
    )
    assert parse_prometheus(text) == {"requests_deferred": 3.0, "predicted_tokens_seconds": 41.5}
    slots = [
        {"id": 0, "n_ctx": 1024, "is_processing": True, "n_prompt_tokens": 100,
         "next_token": [{"n_decoded": 28}]},
        {"id": 1, "n_ctx": 1024, "is_processing": False, "n_prompt_tokens": 20,
         "next_token": [{"n_decoded": 12}]},
        {"id": 2, "n_ctx": 1024, "is_processing": False},
    ]  # fmt: skip
    assert slot_figures(slots) == {
        "slots_total": 3.0,
        "slots_busy": 1.0,
        "kv_cache_used_cells": 160.0,
        "kv_cache_usage_ratio": 160 / 3072,
    }
