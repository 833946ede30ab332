"""Loopback helpers shared by tests that start servers."""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Any

import httpx


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for a server a test starts next)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_ok(url: str, process: subprocess.Popen[Any], seconds: float, what: str) -> None:
    """Until GET `url` answers 200 (a server `process` started is up and ready); if the
    process exits or `seconds` pass first, it is killed and the failure shows its stderr."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        code = process.poll()
        if code is not None or time.monotonic() > deadline:
            why = f"ended (exit code {code})" if code is not None else f"not within {seconds} s"
            process.kill()
            errors = process.communicate(timeout=30)[1] or ""
            text = errors.decode(errors="replace") if isinstance(errors, bytes) else errors
            raise AssertionError(f"{what} did not answer {url}: {why}; {text[-3000:]}")
        time.sleep(0.1)
