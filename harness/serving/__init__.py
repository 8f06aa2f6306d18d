"""Talking to a server: :mod:`~harness.serving.wire` (the protocols: request bodies, reply parsing) and
:mod:`~harness.serving.client` (the async HTTP client); an answer is untrusted, checked at the wire."""
