"""Headless Chromium driven over the DevTools protocol on a pipe (no WebDriver, no extra
package): open a page, wait until its text shows what a test expects, read it, screenshot it.

`chromium --remote-debugging-pipe` reads JSON messages separated by NUL bytes on fd 3 and
writes its answers and events on fd 4. One page target, attached in flat mode.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

# MLflow 3.17's UI opens its assistant panel on the first visit to a local server; once a
# user closed it, the UI remembers under these localStorage keys (<key>_v<version>)
ASSISTANT_CLOSED = {
    "mlflow.assistant.fab.autoOpenedOnFirstLoad_v1": "true",
    "mlflow.assistant.panelOpen_v1": "false",
}


def keep_for_docs(path: Path) -> None:
    """The manual's pictures come from the tests that check what they show:
    SPOREFLOW_DOCS_SCREENSHOTS=docs/img copies each screenshot there."""
    docs = os.environ.get("SPOREFLOW_DOCS_SCREENSHOTS")
    if docs:
        shutil.copy(path, Path(docs) / path.name)


def chromium() -> str | None:
    return (
        shutil.which("chromium")
        or shutil.which("chromium-browser")
        or shutil.which("google-chrome")
    )


class Browser:
    def __init__(self, profile: Path, width: int = 1600, height: int = 1000):
        exe = chromium()
        if exe is None:
            raise FileNotFoundError("no Chromium on PATH")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # Chromium wants the pipe on fds 3 and 4: the shell puts it there, whatever os.pipe gave
        redirect = f'exec "$0" "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}'
        self.proc = subprocess.Popen(
            [
                "/bin/bash",  # dash takes single-digit fds only
                "-c",
                redirect,
                exe,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--no-first-run",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            pass_fds=(to_chrome_r, from_chrome_w),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._next_id = 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.call("Page.enable", session=True)
        self.call("Runtime.enable", session=True)

    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: bool = False, timeout: float = 60, **params: Any) -> dict:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", session=True, expression=expression, returnByValue=True
        )
        return result.get("result", {}).get("value")

    def open(self, url: str, local_storage: dict[str, str] | None = None) -> None:
        """Load `url`; with `local_storage`, its origin's localStorage holds those entries first."""
        if local_storage:
            origin = "/".join(url.split("/", 3)[:3])
            self.call("Page.navigate", session=True, url=f"{origin}/health")
            self.wait_for(lambda: self.evaluate("document.readyState") == "complete", 30)
            for key, value in local_storage.items():
                self.evaluate(f"localStorage.setItem({json.dumps(key)}, {json.dumps(value)})")
        self.call("Page.navigate", session=True, url=url)

    def grid_rows(self) -> list[dict[str, str]]:
        """The rows an ag-grid table shows (MLflow's runs table), each as column id -> cell
        text, in row order; a row split over pinned and scrolling parts is joined."""
        rows = self.evaluate(
            "Array.from(document.querySelectorAll('.ag-row')).map(r => [r.getAttribute('row-index'),"
            " Array.from(r.querySelectorAll('.ag-cell')).map(c => [c.getAttribute('col-id'),"
            " c.innerText])])"
        )
        joined: dict[int, dict[str, str]] = {}
        for index, cells in rows or []:
            joined.setdefault(int(index), {}).update(dict(cells))
        return [joined[i] for i in sorted(joined)]

    def text(self) -> str:
        return " ".join(
            (self.evaluate("document.body ? document.body.innerText : ''") or "").split()
        )

    def wait_for_text(self, wanted: list[str], timeout: float = 90) -> str:
        """The page's text once it shows every string of `wanted` (AssertionError naming the
        missing ones after `timeout` s)."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            missing = [w for w in wanted if w not in text]
            if not missing:
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never showed {missing}; it shows: {text[:3000]}")
            time.sleep(0.5)

    def wait_for(self, condition, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError("condition not met")
            time.sleep(0.2)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        os.close(self._from_chrome)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
