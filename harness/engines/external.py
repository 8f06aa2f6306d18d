"""External: a server someone already started, given by ``engine.url``; nothing is launched or stopped.
Ready per its API's health endpoint, else a 1-token /v1/completions; gone after 3 failed connects in a row.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness.arms.arm import ResolvedArm
from harness.engines.base import Engine, EngineError, LaunchSpec
from harness.engines.process import StatusFn, StopInfo
from harness.serving.client import check_url
from harness.serving.settings import url_identity


class ExternalEngine(Engine):
    kind = "external"

    def __init__(self, cfg: Any, arm: ResolvedArm, run_dir: str | Path, label: str):
        super().__init__(cfg, arm, run_dir, label)
        url = str(getattr(cfg, "url", "") or "").rstrip("/")
        if not url or url == "???":
            raise EngineError("the external engine needs engine.url=http://HOST:PORT")
        try:
            url = check_url(url)
        except ValueError as e:
            raise EngineError(f"engine.url: {e}") from None
        parts = urlsplit(url)
        self._url = url
        self.host = parts.hostname or ""
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._failures = 0
        self._last_check = 0.0

    @property
    def url(self) -> str:
        return self._url

    def launch_identity(self) -> str:
        """One URL is one launch: abh cannot see the server restart, so every eval it serves counts as sharing it."""
        return url_identity(self._url)

    @property
    def ready_what(self) -> str:  # type: ignore[override]
        return f"GET {self.wire.health_path} = 200" if self.wire.health_means_ready else "a 1-token /v1/completions"

    def launch_spec(self) -> LaunchSpec:
        if self._spec is None:
            self._spec = LaunchSpec(argv=[], server_argv=[], env_delta={}, env={}, host=self.host,
                                    port=self.port, url=self.url, launched=False)
        return self._spec

    def launch(self) -> None:
        """Nothing to launch: the server is someone else's."""

    def ready_check(self) -> tuple[bool, str]:
        if self.wire.health_means_ready:
            return self._check_health(self.wire.health_path)
        return self._check_one_token()

    def wait_ready(self, on_status: StatusFn | None = None) -> float:
        t0 = time.monotonic()
        timeout = float(self.cfg.ready_timeout_s)
        last = -1e9
        while True:
            ok, detail = self.ready_check()
            elapsed = time.monotonic() - t0
            if ok:
                self.ready_s = elapsed
                return elapsed
            if elapsed >= timeout:
                raise EngineError(f"external server {self.url}: not ready after {timeout:.0f} s waiting for "
                                  f"{self.ready_what} (last answer: {detail})")
            if on_status and time.monotonic() - last >= 5:
                last = time.monotonic()
                on_status(f"external server {self.url}: waiting for {self.ready_what} ({elapsed:.0f}/"
                          f"{timeout:.0f} s, {detail})")
            time.sleep(max(0.0, min(float(self.cfg.poll_interval_s), timeout - elapsed)))

    def stop(self, on_status: StatusFn | None = None, settle: bool = True) -> StopInfo | None:
        """Nothing to stop: the server is someone else's."""
        return None

    def alive(self) -> str | None:
        now = time.monotonic()
        if now - self._last_check >= 5.0:
            self._last_check = now
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0):
                    self._failures = 0
            except OSError:
                self._failures += 1
        return None if self._failures < 3 else f"external server {self.url} is not accepting connections"


ENGINE = ExternalEngine
