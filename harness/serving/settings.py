"""The ``client:`` config group's schema, each setting's default and range on its field (no HTTP client
imported: the config reads this module)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from harness.util.ranges import problems, ranged

#: Requests in flight by default: SGLang's GSM8K run (``bench_sglang.py --parallel 1319``) sends every question at once.
DEFAULT_PARALLEL = 1319


@dataclass
class ClientSettings:
    """How the client talks to a server, whichever server it is: the ``client:`` config group's schema."""

    #: requests in flight
    parallel: int = ranged(DEFAULT_PARALLEL, 1, whole=True)
    #: whole-request timeout; requests may queue for minutes behind a full batch
    request_timeout_s: float = ranged(3600.0, 0, strict=True)
    #: retries of a request after a timeout, 429, 5xx or a dropped connection
    retries: int = ranged(3, 0, whole=True)
    #: first backoff between retries (doubling, with jitter)
    backoff_s: float = ranged(1.0, 0)
    #: no answer for this long while requests are in flight: probe the server's health; if it does not answer,
    #: the server is hung (:class:`ServerStalled`: stop it, exit 4). 0 turns the watchdog off.
    stall_timeout_s: float = ranged(180.0, 0)
    #: OpenAI model name; empty: the first of ``/v1/models``
    model: str = ""
    #: sent as ``Authorization: Bearer`` with every request, never recorded; take it from the environment
    #: (``client.api_key='${oc.env:OPENAI_API_KEY}'``), or name the variable in ``api_key_env``
    api_key: str = field(default="", repr=False)
    #: the environment variable holding the API key (read when the client is made, when ``api_key`` is empty)
    api_key_env: str = ""
    #: an answer larger than (1 MiB + the tokens the request can produce x this) is that request's error
    #: ("response too large"): nothing huge is held or stored
    max_bytes_per_token: int = ranged(1024, 1, whole=True)
    #: once an answer's headers arrived, its whole body within this many seconds (a body trickled a byte at a
    #: time is that request's error, retried)
    read_timeout_s: float = ranged(120.0, 0, strict=True)
    #: no answer to any request for this long while requests are in flight, even though the health endpoint
    #: answers: the server is not serving (:class:`ServerStalled`, exit 4). 0 turns this off.
    progress_timeout_s: float = ranged(1200.0, 0)

    def problems(self) -> list[str]:
        """What is wrong with these values, one ``name ...`` line each (empty when valid)."""
        out = problems(self)
        if self.api_key_env and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.api_key_env):
            out.append(f"api_key_env must name an environment variable, not {self.api_key_env!r}")
        elif self.api_key_env and not self.api_key and not os.environ.get(self.api_key_env):
            out.append(f"api_key_env={self.api_key_env}: that environment variable is not set")
        return out


def url_identity(url: str) -> str:
    """A stable id of the server at ``url`` (one URL is one launch), without credentials."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port is not None else ""
    return f"url:{parts.scheme}://{host}{port}{parts.path.rstrip('/')}"
