"""OpenAI's Node client (``openai`` 6.x from npm, pinned in tests/node/package.json) against the
real server: chat, a required tool whole and streamed with usage, a legacy prompt list, the
Responses API plain and streamed, and the 400 its users catch. Runs where ``node`` is present
and ``npm ci --prefix tests/node`` installed the client (``make install`` does when npm is
there); otherwise skipped, saying which is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
NODE_DIR = Path(__file__).parent / "node"


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: Node's openai client cannot run here")
    if not (NODE_DIR / "node_modules" / "openai").is_dir():
        pytest.skip("Node's openai client is not installed: run `npm ci --prefix tests/node`")
    return node


def test_node_openai_client(smollm2_server: str) -> None:
    node = _node()
    done = subprocess.run(
        [node, str(NODE_DIR / "clients.mjs"), smollm2_server, "smollm2"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["chat"]
    [call] = out["tool_calls"]
    assert call["function"]["name"] == "get_weather" and out["tool_content"] is None
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    streamed = out["streamed_calls"]
    assert (
        streamed[0]["id"].startswith("call_") and streamed[0]["function"]["name"] == "get_weather"
    )
    arguments = "".join(d["function"].get("arguments", "") for d in streamed)
    assert json.loads(arguments) == {"city": "Paris"} and out["streamed_usage"]["completion_tokens"]
    legacy = out["legacy"]
    assert legacy["id"].startswith("cmpl-")
    assert [c["index"] for c in legacy["choices"]] == [0, 1, 2, 3]
    assert out["response_status"] == "completed" and out["response_text"]
    events = out["response_events"]
    assert events[:2] == ["response.created", "response.in_progress"]
    assert events[-1] == "response.completed" and "response.output_text.delta" in events
    assert out["error"] == {"name": "BadRequestError", "status": 400, "param": "temperature"}
