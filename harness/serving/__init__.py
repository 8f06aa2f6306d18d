"""Talking to a server: :mod:`~harness.serving.wire` (the protocol objects, SGLang native and OpenAI, chosen
once: request bodies and reply parsing), :mod:`~harness.serving.client` (the async HTTP client: retries,
stall watchdog, body cap and read deadline, credentials, the client's settings) and
:mod:`~harness.serving.untrusted` (a server's or anyone's text made safe to print: control characters escaped)."""
