"""schemathesis against the served OpenAPI document: generated requests never get a 5xx, and
responses match the documented status codes, content types and schemas. Bounded (few examples
per operation) so it stays quick on two cores; uses the tiny llama GGUF."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from support.llama import llama_server
from support.serving import app_in_thread
from support.tiny_models import write_tiny_llama_gguf

from runtimes.engine import LoadOptions
from runtimes.gateway.metrics import Metrics
from runtimes.gateway.server import create_app
from runtimes.inprocess.llamacpp import LlamaCppAdapter
from runtimes.llamaserver.engine import LlamaServerEngine
from runtimes.llamaserver.supervisor import ServingConfig

pytestmark = pytest.mark.slow
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module", params=["in-process", "llama-server"])
def base(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = write_tiny_llama_gguf(tmp_path_factory.mktemp("schema") / "tiny.gguf")
    options = LoadOptions(artifact=path, runtime="llama.cpp-cpu", context_size=128, threads=1)
    engine: Any
    if request.param == "llama-server":
        server = llama_server()
        if server is None:
            pytest.skip("llama-server is not built (make install)")
        metrics = Metrics()
        config = ServingConfig(slots=2, context_per_slot=128, threads=1)
        engine = LlamaServerEngine(options, config, model_id="tiny", metrics=metrics, server=server)
        app = create_app(engine, model_id="tiny", context_size=128, metrics=metrics, max_choices=2)
    else:
        engine = LlamaCppAdapter(options)
        app = create_app(engine, model_id="tiny", engine_name="cpu", context_size=128)
    with app_in_thread(app) as url:
        yield url


def test_no_server_errors(base: str) -> None:
    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert sorted(f"{op.method.upper()} {op.path}" for op in operations) == [
        "GET /health",
        "GET /v1/models",
        "GET /v1/models/{model}",
        "GET /v1/responses/{response_id}",
        "POST /v1/chat/completions",
        "POST /v1/completions",
        "POST /v1/embeddings",
        "POST /v1/responses",
    ]
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None
        )
        def check(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=CHECKS)

        check()
    assert httpx.get(f"{base}/health").status_code == 200
