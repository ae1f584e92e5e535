"""Headless Chromium (Debian's `chromium`) driven over the Chrome DevTools Protocol, for page tests.

    with Chromium() as browser:
        page = browser.load("file:///.../status.html")
        page.errors                      # console errors and uncaught exceptions
        page.evaluate("document.title")  # any JavaScript expression's value
        page.screenshot("shot.png")

Chromium starts with a fresh profile and without background networking (this machine has no
network; the flags keep it from trying). `python -m tests.browser PAGE.html OUT.png` saves a
screenshot of a page.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import websocket

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]


def chromium_path() -> str | None:
    """Debian's chromium, if installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Page:
    """One loaded page: what its console said, and a way to ask it things."""

    def __init__(self, browser: Chromium) -> None:
        self.browser = browser
        self.errors: list[str] = []

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited if it is a promise)."""
        result = self.browser.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path | str, *, width: int = 1280) -> None:
        """A PNG of the whole page, `width` CSS pixels wide."""
        height = int(self.evaluate("document.documentElement.scrollHeight"))
        self.browser.call(
            "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
        )
        time.sleep(0.5)  # let responsive charts redraw at the new size
        data = self.browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        Path(path).write_bytes(base64.b64decode(data))


class Chromium:
    """A headless Chromium process and one DevTools connection to its first tab."""

    def __init__(self, *, width: int = 1280, height: int = 900, timeout: float = 60.0) -> None:
        path = chromium_path()
        if path is None:
            raise RuntimeError("chromium is not installed (make install installs it)")
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="icetide-chromium-")
        self.process = subprocess.Popen(
            [path, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port = self._port()
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t.get("type") == "page")
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout)
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _port(self) -> int:
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}")
            if marker.exists() and marker.read_text().strip():
                return int(marker.read_text().split()[0])
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and return its result; events that arrive meanwhile are kept."""
        self._next_id += 1
        ident = self._next_id
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))
            if "method" in message:
                self._events.append(message)

    def _wait_for(self, event: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(e["method"] == event for e in self._events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {event} within {self.timeout}s")
            message = json.loads(self.ws.recv())
            if "method" in message:
                self._events.append(message)

    def load(self, url: str, *, settle_seconds: float = 1.0) -> Page:
        """Open `url`, wait for its load event (and `settle_seconds` more), and collect console errors."""
        self._events.clear()
        self.call("Page.navigate", url=url)
        self._wait_for("Page.loadEventFired")
        time.sleep(settle_seconds)
        self.call("Runtime.evaluate", expression="1")  # drains events that arrived while settling
        page = Page(self)
        for e in self._events:
            params = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                page.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params["args"]))
            elif e["method"] == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                page.errors.append(str(details.get("exception", {}).get("description") or details.get("text")))
            elif e["method"] == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                page.errors.append(str(params["entry"].get("text")))
        return page

    def close(self) -> None:
        """Stop Chromium and remove its profile."""
        try:
            self.ws.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


if __name__ == "__main__":
    source, target = sys.argv[1], sys.argv[2]
    with Chromium() as browser:
        loaded = browser.load(Path(source).resolve().as_uri())
        if loaded.errors:
            print("\n".join(loaded.errors), file=sys.stderr)
        loaded.screenshot(target)
    print(f"{target}: {os.path.getsize(target):,} bytes")
