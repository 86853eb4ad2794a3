"""A headless Chromium driven over the DevTools protocol, for the html report's tests.

No browser download and no websocket library: Debian's `chromium` is started with
`--remote-debugging-pipe`, which speaks the protocol as NUL-terminated JSON over file descriptors 3
(commands in) and 4 (replies and events out). One browser serves a whole test module; pages are
tabs of it.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--disable-dev-shm-usage",
    "--mute-audio",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


def chromium_path() -> str | None:
    """The browser: $RLTRIAGE_CHROMIUM, else Debian's `chromium` on the PATH."""
    wanted = os.environ.get("RLTRIAGE_CHROMIUM")
    if wanted:
        return wanted if os.access(wanted, os.X_OK) else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(Exception):
    pass


class Browser:
    def __init__(self, executable: str, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="rltriage-chromium-")
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def child() -> None:
            # Put the pipe ends at 3 and 4 without clobbering one with the other.
            a = fcntl.fcntl(commands_read, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(replies_write, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.process = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            close_fds=False,
            preexec_fn=child,  # noqa: PLW1509 - tests only, before any thread of ours starts
        )
        os.close(commands_read)
        os.close(replies_write)
        self._next_id = 0
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[threading.Event, list[dict[str, Any]]]] = {}
        self._listeners: dict[str, Callable[[dict[str, Any]], None]] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.send("Target.setDiscoverTargets", {"discover": False})

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                data = os.read(self._replies, 1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            buffer += data
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "id" in message:
                    with self._lock:
                        waiter = self._waiting.pop(message["id"], None)
                    if waiter is not None:
                        waiter[1].append(message)
                        waiter[0].set()
                else:
                    listener = self._listeners.get(message.get("sessionId", ""))
                    if listener is not None:
                        listener(message)
        with self._lock:
            for event, _box in self._waiting.values():
                event.set()

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None, timeout: float | None = None) -> dict[str, Any]:
        with self._lock:
            self._next_id += 1
            ident = self._next_id
            done = threading.Event()
            box: list[dict[str, Any]] = []
            self._waiting[ident] = (done, box)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._commands, data) :]
        if not done.wait(timeout or self.timeout) or not box:
            raise BrowserError(f"{method}: no reply from the browser")
        reply = box[0]
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return dict(reply.get("result", {}))

    def new_page(self, width: int = 1400, height: int = 1000) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, target, session)
        self._listeners[session] = page._event
        for domain in ("Page", "Runtime", "Network", "Log"):
            page.call(f"{domain}.enable")
        page.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        return page

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except BrowserError:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        for fd in (self._commands, self._replies):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)


class Page:
    def __init__(self, browser: Browser, target: str, session: str) -> None:
        self.browser = browser
        self.target = target
        self.session = session
        self.events: list[dict[str, Any]] = []
        self._loaded = threading.Event()

    def _event(self, message: dict[str, Any]) -> None:
        self.events.append(message)
        if message.get("method") == "Page.loadEventFired":
            self._loaded.set()

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, session=self.session)

    def open(self, url: str) -> float:
        """Navigate and wait for the load event; returns the seconds it took."""
        self.events.clear()
        self._loaded.clear()
        started = time.perf_counter()
        reply = self.call("Page.navigate", {"url": url})
        if reply.get("errorText"):
            raise BrowserError(f"{url}: {reply['errorText']}")
        if not self._loaded.wait(self.browser.timeout):
            raise BrowserError(f"{url}: no load event")
        return time.perf_counter() - started

    def evaluate(self, expression: str) -> Any:
        reply = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in reply:
            raise BrowserError(f"evaluate: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and log entries of level warning or error
        (CSP violations are reported there) since the last navigation."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                found.append(f"console.{params['type']}: {[a.get('value', a.get('description')) for a in params.get('args', [])]}")
            elif method == "Runtime.exceptionThrown":
                found.append(f"exception: {params.get('exceptionDetails', {}).get('text')}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") in ("error", "warning"):
                entry = params["entry"]
                found.append(f"log {entry.get('source')}/{entry.get('level')}: {entry.get('text')} {entry.get('url', '')}")
        return found

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e.get("method") == "Network.requestWillBeSent"]

    def screenshot(self, path: Path, clip: tuple[float, float, float, float] | None = None, max_height: int = 6000) -> None:
        """A PNG of the page from its top (or of `clip`: x, y, width, height in page pixels)."""
        self.evaluate("window.scrollTo(0, 0)")
        if clip is None:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            clip = (0, 0, size["width"], min(size["height"], max_height))
        x, y, width, height = clip
        params = {"format": "png", "captureBeyondViewport": True, "clip": {"x": x, "y": y, "width": width, "height": height, "scale": 1}}
        data = self.call("Page.captureScreenshot", params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def viewport_screenshot(self, path: Path) -> None:
        """A PNG of what the window shows, scrolled where it is."""
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self.browser._listeners.pop(self.session, None)
        try:
            self.browser.send("Target.closeTarget", {"targetId": self.target}, timeout=5)
        except BrowserError:
            pass
