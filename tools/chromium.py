"""Open a report in headless Chromium and see what a reader's browser sees.

Used by the browser test and by ``tools/regenerate_reports.py`` (for docs/report.png);
it is no part of the installed package.
It speaks the DevTools protocol over ``--remote-debugging-pipe`` (null-terminated
JSON on file descriptors 3 and 4), so it needs only the Python standard library
and the system's Chromium (Debian: ``apt-get install chromium``), no websocket
client and no browser download. It records every JavaScript exception, console
error and log error, and every network request the page makes, waits for plotly
to draw, counts the figures drawn and takes a screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Executables tried in order when no path is given.
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

#: Flags that keep Chromium quiet, offline and headless. The host resolver rule makes any
#: request that does slip out fail at once instead of reaching the network.
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
    "--host-resolver-rules=MAP * ~NOTFOUND", "--remote-debugging-pipe",
)

#: Returns what the checks need from the page, after plotly has run.
PAGE_STATE_JS = """
(() => {
  const figures = Array.from(document.querySelectorAll('[data-figure]'));
  return JSON.stringify({
    title: document.title,
    sections: Array.from(document.querySelectorAll('main > section')).map(s => s.id),
    figures: figures.map(f => f.getAttribute('data-figure')),
    drawn: figures.filter(f => f.querySelector('.js-plotly-plot .main-svg')).map(f => f.getAttribute('data-figure')),
    plotly: typeof window.Plotly === 'object' ? window.Plotly.version : null,
    marks: document.querySelectorAll('mark').length,
    clamped: document.querySelectorAll('.caption.clamped').length,
    expand_buttons: document.querySelectorAll('button.expand').length,
    height: document.documentElement.scrollHeight,
    // where each section and the first table lie on the page (CSS pixels from its top)
    boxes: Object.fromEntries(Array.from(document.querySelectorAll('main > section')).map(s => {
      const box = s.getBoundingClientRect();
      return [s.id, {top: box.top + window.scrollY, bottom: box.bottom + window.scrollY}];
    })),
    first_table_top: (() => {
      const first = document.querySelector('main table');
      return first ? first.getBoundingClientRect().top + window.scrollY : null;
    })()
  });
})()
"""


def find_chromium(path: str | None = None) -> str | None:
    """Path of a Chromium executable, or None when none is installed."""
    if path:
        return path if Path(path).exists() else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageReport:
    """What happened when the page loaded."""

    url: str
    errors: list[str] = field(default_factory=list)      # exceptions, console errors, log errors
    requests: list[str] = field(default_factory=list)    # every URL the page asked for
    state: dict = field(default_factory=dict)            # PAGE_STATE_JS result
    screenshot: bytes | None = None                      # PNG

    @property
    def external_requests(self) -> list[str]:
        """Requests for anything but the file itself and inline data."""
        return [url for url in self.requests if not url.startswith(("file:", "data:", "blob:", "about:"))]


class ChromiumError(RuntimeError):
    pass


class _Pipe:
    """DevTools protocol over Chromium's debugging pipe."""

    def __init__(self, executable: str, user_data_dir: str, extra_flags=()):
        self._to_chrome_read, self._to_chrome_write = os.pipe()
        self._from_chrome_read, self._from_chrome_write = os.pipe()
        to_read, from_write = self._to_chrome_read, self._from_chrome_write

        def child_fds():  # Chromium reads commands on fd 3 and writes replies to fd 4
            # copy both ends above 4 first: either may already sit on fd 3 or 4
            high_read, high_write = os.dup(to_read), os.dup(from_write)
            while min(high_read, high_write) <= 4:
                high_read, high_write = os.dup(high_read), os.dup(high_write)
            os.dup2(high_read, 3)
            os.dup2(high_write, 4)
            os.set_inheritable(3, True)
            os.set_inheritable(4, True)

        self.log = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [executable, *FLAGS, *extra_flags, f"--user-data-dir={user_data_dir}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log, preexec_fn=child_fds, close_fds=False)
        os.close(self._to_chrome_read)
        os.close(self._from_chrome_write)
        self._next_id = 0
        self._replies: dict[int, queue.Queue] = {}
        self.events: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buffer = b""
        with open(self._from_chrome_read, "rb", buffering=0) as stream:
            while True:
                chunk = stream.read(1 << 16)
                if not chunk:
                    break
                buffer += chunk
                while b"\0" in buffer:
                    raw, buffer = buffer.split(b"\0", 1)
                    message = json.loads(raw)
                    if "id" in message:
                        with self._lock:
                            target = self._replies.get(message["id"])
                        if target is not None:
                            target.put(message)
                    else:
                        self.events.put(message)
        self.events.put({"method": "_closed"})

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30.0) -> dict:
        with self._lock:
            self._next_id += 1
            message_id = self._next_id
            reply: queue.Queue = queue.Queue()
            self._replies[message_id] = reply
        message = {"id": message_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome_write, json.dumps(message).encode() + b"\0")
        try:
            answer = reply.get(timeout=timeout)
        except queue.Empty:
            raise ChromiumError(f"Chromium did not answer {method} within {timeout:.0f} s") from None
        if "error" in answer:
            raise ChromiumError(f"{method}: {answer['error'].get('message')}")
        return answer.get("result", {})

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (ChromiumError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_chrome_write)

    def stderr_tail(self, size: int = 2000) -> str:
        self.log.seek(0)
        return self.log.read().decode("utf-8", errors="replace")[-size:]


def _event_error(event: dict) -> str | None:
    method, params = event.get("method"), event.get("params", {})
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails", {})
        description = (details.get("exception") or {}).get("description") or details.get("text")
        return f"exception: {description} (line {details.get('lineNumber')})"
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        args = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
        return f"console.{params['type']}: {args}"
    if method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        entry = params["entry"]
        return f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}".strip()
    return None


def open_page(html_path: str | Path, *, width: int = 1280, height: int = 2000, screenshot: bool = True,
              full_page: bool = False, executable: str | None = None, timeout: float = 90.0,
              settle_s: float = 1.0, action: str | None = None) -> PageReport:
    """Load ``html_path`` in headless Chromium and report errors, requests, page state and a PNG.

    Waits for the load event, then until every ``[data-figure]`` holds a drawn plotly
    SVG (or ``timeout``), then runs the JavaScript ``action`` (e.g. a click) when given,
    then waits ``settle_s`` more for late errors.
    """
    executable = find_chromium(executable)
    if executable is None:
        raise ChromiumError("no Chromium found (Debian: apt-get install chromium)")
    url = Path(html_path).resolve().as_uri()
    report = PageReport(url)
    with tempfile.TemporaryDirectory(prefix="capgeo-chromium-") as profile_dir:
        pipe = _Pipe(executable, profile_dir)
        try:
            target = pipe.send("Target.createTarget", {"url": "about:blank"}, timeout=60)["targetId"]
            session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Network", "Log"):
                pipe.send(f"{domain}.enable", session=session)
            pipe.send("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
            pipe.send("Page.navigate", {"url": url}, session=session)
            deadline = time.monotonic() + timeout
            loaded = False

            def drain(until: float) -> None:
                nonlocal loaded
                while time.monotonic() < until:
                    try:
                        event = pipe.events.get(timeout=max(0.01, min(0.2, until - time.monotonic())))
                    except queue.Empty:
                        continue
                    if event.get("method") == "_closed":
                        raise ChromiumError("Chromium exited: " + pipe.stderr_tail())
                    if event.get("sessionId") not in (None, session):
                        continue
                    error = _event_error(event)
                    if error:
                        report.errors.append(error)
                    if event.get("method") == "Network.requestWillBeSent":
                        report.requests.append(event["params"]["request"]["url"])
                    if event.get("method") == "Page.loadEventFired":
                        loaded = True
                        return

            drain(deadline)
            if not loaded:
                raise ChromiumError(f"{url} did not finish loading within {timeout:.0f} s")
            while time.monotonic() < deadline:
                state = json.loads(pipe.send("Runtime.evaluate", {"expression": PAGE_STATE_JS, "returnByValue": True},
                                             session=session)["result"]["value"])
                if set(state["drawn"]) >= set(state["figures"]):
                    break
                drain(time.monotonic() + 0.25)
            if action:
                pipe.send("Runtime.evaluate", {"expression": action, "userGesture": True}, session=session)
            loaded = False
            drain(time.monotonic() + settle_s)
            report.state = json.loads(pipe.send("Runtime.evaluate", {"expression": PAGE_STATE_JS, "returnByValue": True},
                                                session=session)["result"]["value"])
            if screenshot:
                params = {"format": "png"}
                if full_page:
                    params["captureBeyondViewport"] = True
                    params["clip"] = {"x": 0, "y": 0, "width": width, "height": report.state["height"], "scale": 1}
                data = pipe.send("Page.captureScreenshot", params, session=session, timeout=60)["data"]
                report.screenshot = base64.b64decode(data)
        finally:
            pipe.close()
    return report
