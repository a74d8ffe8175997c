"""The uniform OpenAI-compatible gateway (FastAPI): the app, its routes,
request and response schemas, errors, images, metrics and streams, whatever the engine."""
