"""Talking to a server: :mod:`~harness.serving.wire` (the protocol objects, SGLang native and OpenAI, chosen
once: request bodies and reply parsing) and :mod:`~harness.serving.client` (the async HTTP client: retries,
stall watchdog, the client's settings)."""
