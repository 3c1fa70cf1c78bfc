"""Serving an app with uvicorn in a background thread (tests, benchmarks)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

__all__ = ["BackgroundServer"]


class BackgroundServer:
    """uvicorn serving ``app`` in a daemon thread on ``host`` (port 0: a free port)."""

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"
    ) -> None:
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        self.host = host
        self.port = port
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> BackgroundServer:
        self._thread = threading.Thread(
            target=self.server.run, name="keepersim-uvicorn", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError("uvicorn stopped before it started (port in use?)")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"uvicorn did not start within {timeout:g}s")
            time.sleep(0.01)
        for server in self.server.servers:
            for sock in server.sockets:
                self.port = int(sock.getsockname()[1])
                break
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
