"""OpenAI's Responses API (``POST /v1/responses``), answered by any engine's chat."""
