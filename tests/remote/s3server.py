"""An S3 API server (moto's) for the wide-store test and benchmark: every request is logged
with its arrival and answer times, and can be delayed by `latency` seconds like a distant
object store. The timeline tells how many round trips a reader made one after the other
(`dependent_rounds`), which request counts alone cannot.

    python tests/remote/s3server.py [--latency 0.02]   # prints the port, serves forever

`GET /__timeline` answers the log as JSON (method, path, arrived, answered; epoch seconds),
`GET /__reset` empties it; neither is logged.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any


class Timed:
    """A WSGI middleware: logs each request's method, path and times, after sleeping
    `latency` seconds before answering."""

    def __init__(self, app: Callable[..., Any], latency: float = 0.0) -> None:
        self.app = app
        self.latency = latency
        self.lock = threading.Lock()
        self.timeline: list[tuple[str, str, float, float]] = []

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/__timeline", "/__reset"):
            with self.lock:
                body = json.dumps(self.timeline).encode()
                if path == "/__reset":
                    self.timeline.clear()
            start_response("200 OK", [("Content-Length", str(len(body)))])
            return [body]
        arrived = time.time()
        if self.latency:
            time.sleep(self.latency)
        out = list(self.app(environ, start_response))
        query = environ.get("QUERY_STRING", "")
        with self.lock:
            self.timeline.append(
                (environ["REQUEST_METHOD"], path + ("?" + query if query else ""), arrived, time.time())
            )
        return out

    def reset(self) -> None:
        with self.lock:
            self.timeline.clear()


def dependent_rounds(timeline: Iterable[tuple[Any, ...]]) -> int:
    """The longest chain of requests each sent after the one before was answered: the round
    trips a reader waited for one after another (a wave of concurrent requests is one)."""
    spans = sorted((float(t[2]), float(t[3])) for t in timeline)
    chain: list[tuple[float, int]] = []  # (answered, chain length ending with that request)
    best = 0
    for start, end in spans:
        before = max((n for done, n in chain if done <= start), default=0)
        chain.append((end, before + 1))
        best = max(best, before + 1)
    return best


def make(latency: float = 0.0) -> tuple[Any, Timed]:
    """A threaded moto S3 server on a free port of 127.0.0.1 (not started) and its log."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
    from moto.server import MotoRequestHandler
    from werkzeug.serving import make_server

    timed = Timed(DomainDispatcherApplication(create_backend_app), latency)
    server = make_server("127.0.0.1", 0, timed, threaded=True, request_handler=MotoRequestHandler)
    return server, timed


def start(latency: float = 0.0) -> tuple[Any, Timed, str]:
    """`make`, serving from a background thread; the server, its log and its endpoint URL."""
    server, timed = make(latency)
    threading.Thread(target=server.serve_forever, name="s3-server", daemon=True).start()
    return server, timed, f"http://127.0.0.1:{server.server_address[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every request")
    args = parser.parse_args()
    server, _ = make(args.latency)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
