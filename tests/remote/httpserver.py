"""A real HTTP server for remote-store tests and the remote benchmark: serves a folder, counts
requests, and injects latency and faults.

Faults are queued per URL path (`inject(path, action, times)`): an HTTP status (`"503"`),
`"truncate"` (Content-Length of the whole file, half the body, then the connection closes),
or `"drop"` (the connection closes before any answer). Every response to a GET or HEAD carries
an ETag built from the file's mtime, size and `salt`, so tests can make a store "change".
A GET with a single `Range: bytes=...` (start-end, start-, or the suffix -n) gets that part
(206, with Content-Range), as object stores answer; `ranges` logs each range served. With
`serve_ranges` False the server ignores Range headers and sends whole files (200), as HTTP
allows.

    python tests/remote/httpserver.py ROOT [--latency 0.02]   # prints the port, serves forever
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit


class FaultyServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins handler threads: none is left running at exit
    block_on_close = True
    request_queue_size = 128

    def __init__(self, root: Path, latency: float = 0.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root.resolve()
        self.latency = latency
        self.salt = ""
        self.lock = threading.Lock()
        self.log: list[tuple[str, str]] = []
        #: (method, path, seconds since the epoch when it arrived, when its answer was sent)
        self.timeline: list[tuple[str, str, float, float]] = []
        self.faults: dict[str, list[str | None]] = {}
        self.always: dict[str, str] = {}
        self.on_request: Callable[[str, str], None] | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self.headers_seen: list[dict[str, str]] = []
        self.ranges: list[tuple[str, int, int]] = []  # (path, first byte, bytes sent) per 206
        self.serve_ranges = True
        #: With `answer_head` False every HEAD is answered 405 (a server that serves GET only).
        self.answer_head = True
        self.open_sockets: set[Any] = set()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.open_sockets.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.lock:
            self.open_sockets.discard(request)
        super().shutdown_request(request)

    def stop(self) -> None:
        """Stop serving, end the kept-alive connections and join every handler thread, so
        that no server thread is left running (blocked on a socket) when the process exits."""
        self.shutdown()
        with self.lock:
            sockets = list(self.open_sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.server_close()

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hung up mid-answer (a timeout test) is not the server's problem."""

    @property
    def port(self) -> int:
        return self.server_address[1]

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def inject(self, path: str, action: str, times: int | None = 1) -> None:
        """Answer requests for `path` with `action` `times` times (None: every time)."""
        with self.lock:
            if times is None:
                self.always["/" + path.lstrip("/")] = action
            else:
                self.faults.setdefault("/" + path.lstrip("/"), []).extend([action] * times)

    def reset(self) -> None:
        with self.lock:
            self.log.clear()
            self.timeline.clear()
            self.faults.clear()
            self.always.clear()
            self.salt = ""
            self.on_request = None
            self.latency = 0.0
            self.max_in_flight = 0
            self.headers_seen.clear()
            self.ranges.clear()
            self.serve_ranges = True
            self.answer_head = True

    def count(self, method: str | None = None, where: Callable[[str], bool] | None = None) -> int:
        with self.lock:
            return sum(1 for m, p in self.log if (method is None or m == method) and (where is None or where(p)))

    def counts(self) -> Counter[str]:
        with self.lock:
            return Counter(m for m, _ in self.log)

    def take_fault(self, method: str, path: str) -> str | None:
        with self.lock:
            self.log.append((method, path))
            hook = self.on_request
            queued = self.faults.get(path)
            action = queued.pop(0) if queued else self.always.get(path)
        if hook is not None:
            hook(method, path)
        return action


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out as two writes; with Nagle's algorithm on, the body of a
    # kept-alive connection waits for the client's delayed ACK (40 ms on Linux), a stall no
    # production server has (they set TCP_NODELAY) and that would swamp the injected latency.
    disable_nagle_algorithm = True
    server: FaultyServer

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._answer(body=True)

    def do_HEAD(self) -> None:
        if not self.server.answer_head:
            self.server.take_fault("HEAD", self.path)
            self.send_error(405)
            return
        self._answer(body=False)

    def _answer(self, *, body: bool) -> None:
        server = self.server
        arrived = time.time()
        with server.lock:
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
            server.headers_seen.append(dict(self.headers.items()))
        try:
            self._respond(body=body)
        finally:
            with server.lock:
                server.in_flight -= 1
                if not self.path.startswith("/__"):
                    server.timeline.append((self.command, unquote(urlsplit(self.path).path), arrived, time.time()))

    def _respond(self, *, body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        if path in ("/__log", "/__timeline"):  # the benchmark's view of the log (not logged itself)
            with self.server.lock:
                payload = json.dumps(self.server.log if path == "/__log" else self.server.timeline).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        action = self.server.take_fault(self.command, path)
        if self.server.latency:
            time.sleep(self.server.latency)
        if action == "drop":
            self._drop()
            return
        if action is not None and action.isdigit():
            self._status(int(action))
            return
        file = (self.server.root / path.lstrip("/")).resolve()
        if not file.is_relative_to(self.server.root) or not file.is_file():
            self._status(404)
            return
        st = file.stat()
        size = st.st_size
        part = _byte_range(self.headers.get("Range"), size) if body and self.server.serve_ranges else None
        first, count = part if part is not None else (0, size)
        self.send_response(200 if part is None else 206)
        self.send_header("Content-Length", str(count))
        if part is not None:
            self.send_header("Content-Range", f"bytes {first}-{first + count - 1}/{size}")
            with self.server.lock:
                self.server.ranges.append((path, first, count))
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("ETag", f'"{st.st_mtime_ns:x}-{size:x}{self.server.salt}"')
        self.send_header("Last-Modified", formatdate(st.st_mtime, usegmt=True))
        self.end_headers()
        if not body:
            return
        self.wfile.flush()
        with open(file, "rb") as f:  # sendfile: the kernel copies, so the server costs little CPU
            if action == "truncate":
                self.connection.sendfile(f, first, count // 2)
                self._drop()
                return
            if count:
                self.connection.sendfile(f, first, count)

    def _status(self, code: int) -> None:
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


def _byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(first byte, byte count) a `Range` header asks for, clipped to the file; None for no
    header or one this server does not serve (several ranges: answered whole, as allowed)."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[len("bytes=") :].partition("-")
    if not first:
        start = max(0, size - int(last))
        return start, size - start
    start = min(int(first), size)
    stop = size if not last else min(int(last) + 1, size)
    return start, max(0, stop - start)


def start(root: Path, latency: float = 0.0) -> FaultyServer:
    """A server on a free port of 127.0.0.1, serving `root` from a background thread."""
    server = FaultyServer(root, latency)
    threading.Thread(target=server.serve_forever, name="faulty-http", daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every request")
    args = parser.parse_args()
    server = FaultyServer(args.root, args.latency)
    print(server.port, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
