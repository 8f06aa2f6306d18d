"""Open a report in headless Chromium and see what a reader sees: DOM text, console errors, network requests,
a full-page screenshot. The DevTools protocol runs over a pipe (``--remote-debugging-pipe``: commands on fd 3,
replies on fd 4, NUL-separated JSON): no package beyond the standard library, no port.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

from harness.results.records import JSON, JSONObject

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
#: Flags that keep Chromium off the network and quiet on a closed machine.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
         "--remote-debugging-pipe"]


class BrowserError(RuntimeError):
    """Chromium is missing, did not start, or did not answer."""


class Command(TypedDict):
    """A DevTools protocol command as sent: ``id`` pairs the reply with it, ``sessionId`` sends it to a page."""

    id: int
    method: str
    params: JSONObject
    sessionId: NotRequired[str]


class Message(TypedDict, total=False):
    """A DevTools protocol message from Chromium: the reply to the command of ``id`` (its ``result`` or its
    ``error``), or an event (``method``, ``params``)."""

    id: int
    result: JSONObject
    error: JSON
    method: str
    params: JSONObject
    sessionId: str


def _obj(v: JSON | None) -> JSONObject:
    """``v`` if it is a JSON object, else an empty one."""
    return v if isinstance(v, dict) else {}


def _objects(v: JSON | None) -> list[JSONObject]:
    """The JSON objects of the array ``v`` (none when it is no array)."""
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


@dataclass
class PageResult:
    url: str
    title: str
    text: str
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    #: the values of the ``evaluate`` expressions, by name (as JSON)
    values: dict[str, JSON] = field(default_factory=dict)
    screenshot: Path | None = None
    height: int = 0


def find_chromium() -> str | None:
    env = os.environ.get("ABH_CHROMIUM")
    if env and Path(env).exists():
        return env
    return next((p for p in (shutil.which(c) for c in CANDIDATES) if p), None)


class _Pipe:
    """A DevTools protocol session over Chromium's debugging pipe."""

    def __init__(self, exe: str, width: int, height: int, user_dir: str, log: Path):
        lo = os.pipe() + os.pipe()
        # Copies at fd >= 10, so that placing them at 3 and 4 in the child cannot clobber one another.
        hi = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in lo]
        for fd in lo:
            os.close(fd)
        cmd_r, self._w, self._r, res_w = hi  # chromium reads cmd_r (fd 3), writes res_w (fd 4)

        def child() -> None:
            os.dup2(cmd_r, 3)
            os.dup2(res_w, 4)

        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={user_dir}", f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, close_fds=False,
            preexec_fn=child, start_new_session=True)  # noqa: PLW1509 - single-threaded caller
        os.close(cmd_r)
        os.close(res_w)
        self._buf = b""
        self._id = 0
        self.events: list[Message] = []

    def send(self, method: str, params: JSONObject | None = None, session: str | None = None,
             timeout: float = 30.0) -> JSONObject:
        """Send a command; return its reply's ``result`` (events that arrive meanwhile are kept in ``events``)."""
        self._id += 1
        msg: Command = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        try:
            os.write(self._w, json.dumps(msg).encode() + b"\0")
        except OSError as e:
            raise BrowserError(f"Chromium closed its debugging pipe ({e}); see {self._log.name}") from None
        deadline = time.monotonic() + timeout
        while True:
            m = self._next(deadline - time.monotonic())
            if m is None:
                raise BrowserError(f"Chromium did not answer {method} within {timeout:.0f} s")
            if m.get("id") == self._id:
                if "error" in m:
                    raise BrowserError(f"{method}: {m['error']}")
                return m.get("result") or {}
            if "method" in m:
                self.events.append(m)

    def wait_event(self, method: str, timeout: float) -> Message | None:
        for e in self.events:
            if e.get("method") == method:
                return e
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = self._next(deadline - time.monotonic())
            if m is None:
                return None
            if "method" in m:
                self.events.append(m)
                if m["method"] == method:
                    return m
        return None

    def _next(self, timeout: float) -> Message | None:
        deadline = time.monotonic() + max(0.0, timeout)
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._r], [], [], left)
            if not ready:
                return None
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise BrowserError(f"Chromium exited (code {self.proc.poll()}); see {self._log.name}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            os.write(self._w, json.dumps({"id": 0, "method": "Browser.close"}).encode() + b"\0")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        for fd in (self._w, self._r):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._log.close()


def _console_errors(events: list[Message]) -> list[str]:
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params") or {}
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append(f"console.{p['type']}: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in _objects(p.get("args"))))
        elif m == "Runtime.exceptionThrown":
            d = _obj(p.get("exceptionDetails"))
            out.append("exception: " + str(_obj(d.get("exception")).get("description") or d.get("text")))
        elif m == "Log.entryAdded" and _obj(p.get("entry")).get("level") == "error":
            ent = _obj(p.get("entry"))
            out.append(f"log ({ent.get('source')}): {ent.get('text')} {ent.get('url') or ''}".strip())
    return out


def render_page(path: str | Path, screenshot: str | Path | None = None, *, width: int = 1280,
                height: int = 900, full_page: bool = True, max_height: int = 20000,
                evaluate: dict[str, str] | None = None, timeout: float = 60.0,
                executable: str | None = None) -> PageResult:
    """Load ``path`` from ``file://`` in headless Chromium; return what it shows and logs.

    ``evaluate``: name -> JavaScript expression, evaluated after load (values by JSON). Raises
    BrowserError when Chromium is missing or fails.
    """
    exe = executable or find_chromium()
    if exe is None:
        raise BrowserError("Chromium not found (looked for " + ", ".join(CANDIDATES)
                           + "); install the Debian package `chromium` or set ABH_CHROMIUM")
    url = Path(path).resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="abh-chromium-") as tmp:
        pipe = _Pipe(exe, width, height, str(Path(tmp) / "profile"), Path(tmp) / "chromium.log")
        try:
            targets = _objects(pipe.send("Target.getTargets", timeout=timeout).get("targetInfos"))
            page = next((t["targetId"] for t in targets if t.get("type") == "page"), None)
            if page is None:
                page = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            sid = str(pipe.send("Target.attachToTarget", {"targetId": page, "flatten": True})["sessionId"])
            for dom in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
                pipe.send(dom, session=sid)
            with contextlib.suppress(BrowserError):  # the page's copy buttons may write the clipboard (tests read it)
                pipe.send("Browser.grantPermissions", {"permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
                pipe.send("Emulation.setFocusEmulationEnabled", {"enabled": True}, session=sid)  # as a focused tab
            pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                             "deviceScaleFactor": 1, "mobile": False}, session=sid)
            pipe.events.clear()
            nav = pipe.send("Page.navigate", {"url": url}, session=sid, timeout=timeout)
            if nav.get("errorText"):
                raise BrowserError(f"cannot open {url}: {nav['errorText']}")
            if pipe.wait_event("Page.loadEventFired", timeout) is None:
                raise BrowserError(f"{url} did not finish loading within {timeout:.0f} s")
            time.sleep(0.3)  # let late console messages / requests arrive

            def ev(expr: str) -> JSON:
                r = pipe.send("Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True,
                                                   "userGesture": True}, session=sid)
                if r.get("exceptionDetails"):
                    raise BrowserError(f"evaluating {expr!r}: {_obj(r['exceptionDetails']).get('text')}")
                return _obj(r.get("result")).get("value")

            title = ev("document.title")
            text = ev("document.body ? document.body.innerText : ''")
            values = {k: ev(x) for k, x in (evaluate or {}).items()}
            shot: Path | None = None
            page_h = height
            if screenshot is not None:
                metrics = pipe.send("Page.getLayoutMetrics", session=sid)
                size = _obj(metrics.get("cssContentSize") or metrics.get("contentSize"))
                content_h = size.get("height", height)
                page_h = (int(min(max_height, content_h if isinstance(content_h, int | float) else height)) if full_page
                          else height)
                params: JSONObject = {"format": "png"}
                if full_page:
                    params.update(captureBeyondViewport=True,
                                  clip={"x": 0, "y": 0, "width": width, "height": page_h, "scale": 1})
                data = str(pipe.send("Page.captureScreenshot", params, session=sid, timeout=timeout)["data"])
                shot = Path(screenshot)
                shot.parent.mkdir(parents=True, exist_ok=True)
                shot.write_bytes(base64.b64decode(data))
            pipe.send("Runtime.evaluate", {"expression": "0"}, session=sid)  # flush pending events
            events = pipe.events
            requests = [str(_obj(_obj(e.get("params")).get("request")).get("url")) for e in events
                        if e.get("method") == "Network.requestWillBeSent"]
            return PageResult(url=url, title=str(title or ""), text=str(text or ""), console_errors=_console_errors(events),
                              requests=requests, values=values, screenshot=shot, height=page_h)
        finally:
            pipe.close()
