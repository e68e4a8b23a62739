"""Azurite (Microsoft's Azure Storage emulator, blob service only) for the `az://` tests.

Azurite is a Node.js program, installed with npm rather than pip, so the tests look for it:
the path in `ZARRSQL_AZURITE` (the `azurite-blob` executable), else `azurite-blob` on PATH,
else `node_modules/.bin/azurite-blob` under the virtualenv (what `npm install --prefix
<venv> azurite` makes). It runs on 127.0.0.1 on a free port, in a temporary folder, as a
child process in its own process group, and `stop` ends that group; on Linux the child also
gets SIGTERM if the test process dies without tearing down. Nothing outlives the session.

The account is Azurite's built-in development account. Its name and key are published by
Microsoft for the emulator and open nothing outside it, which is why they can sit here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ACCOUNT = "devstoreaccount1"
#: The emulator's fixed account key (Microsoft documents it for Azurite; it is not a secret).
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
ENV_PATH = "ZARRSQL_AZURITE"
ENV_EXPECT = "ZARRSQL_EXPECT_AZURITE"
INSTALL_HINT = (
    "Azurite (the Azure Storage emulator) is needed for the az:// tests and was not found: install it "
    "with `npm install --prefix <dir> azurite@3.35` and set "
    f"{ENV_PATH}=<dir>/node_modules/.bin/azurite-blob (or put azurite-blob on PATH; "
    "`npm install --prefix <venv> azurite` is found without the variable)"
)
#: Seconds Azurite may take to accept connections (Node's start-up is 1-2 s on a quiet machine).
START_TIMEOUT = 60.0
#: Seconds Azurite gets to exit after SIGTERM before it is killed.
STOP_TIMEOUT = 10.0


def find_azurite() -> str | None:
    """The `azurite-blob` executable to run, or None when it is not installed."""
    configured = os.environ.get(ENV_PATH)
    if configured:
        # a variable that points nowhere is a setup mistake: say so instead of searching on
        if not (os.path.isfile(configured) and os.access(configured, os.X_OK)):
            raise RuntimeError(f"{ENV_PATH}={configured!r} is not an executable file; {INSTALL_HINT}")
        return configured
    on_path = shutil.which("azurite-blob")
    if on_path:
        return on_path
    in_venv = Path(sys.prefix) / "node_modules" / ".bin" / "azurite-blob"
    return str(in_venv) if in_venv.is_file() and os.access(in_venv, os.X_OK) else None


def _die_with_parent() -> None:
    """Runs in the child before Azurite starts: on Linux, ask for SIGTERM when the test process
    dies, so that even a killed test run (where no teardown runs) leaves no Azurite behind."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Azurite:
    """A running Azurite blob service and how to reach it."""

    process: subprocess.Popen[bytes]
    port: int
    location: Path
    log: Path
    scheme: str = "http"
    _stopped: bool = field(default=False, repr=False)

    @property
    def endpoint(self) -> str:
        """The blob endpoint: Azurite takes the account from the path's first segment."""
        return f"{self.scheme}://{self.host}"

    @property
    def host(self) -> str:
        """What adlfs calls `account_host`: the endpoint without its scheme."""
        return f"127.0.0.1:{self.port}/{ACCOUNT}"

    def connection_string(self, key: str | None = ACCOUNT_KEY) -> str:
        """A connection string for the development account; without `key`, an anonymous one."""
        parts = [f"AccountName={ACCOUNT}", f"BlobEndpoint={self.endpoint}"]
        if key is not None:
            parts.insert(1, f"AccountKey={key}")
        return ";".join([f"DefaultEndpointsProtocol={self.scheme}", *parts]) + ";"

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """End Azurite's process group: SIGTERM, then SIGKILL if it lingers."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(STOP_TIMEOUT)


def make_tls_files(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway certificate authority and a server certificate for 127.0.0.1 it signed.

    adlfs builds `https://` account URLs only, so the test of reading with just an account
    name and host needs Azurite on TLS, and a client that trusts it. Returns the CA
    certificate (for the client's `SSL_CERT_FILE`), the server certificate and its key.
    """
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "zarrsql test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "ca.pem", folder / "server.pem", folder / "server-key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def start(executable: str, location: Path, tls: tuple[Path, Path] | None = None) -> Azurite:
    """Start Azurite's blob service on a free port of 127.0.0.1, storing its data in `location`.

    With `tls` (certificate, key), it serves HTTPS instead of HTTP.

    Raises RuntimeError with Azurite's own output when it exits or stays deaf for
    `START_TIMEOUT` seconds, so a broken install fails with a reason instead of a hang.
    """
    location.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    log = location / "azurite.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                executable,
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                str(port),
                "--location",
                str(location),
                "--silent",
                # azure-storage-blob may speak a newer API version than this Azurite knows
                "--skipApiVersionCheck",
                # telemetry would try to reach the internet from a test run
                "--disableTelemetry",
                *(["--cert", str(tls[0]), "--key", str(tls[1])] if tls else []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, which `stop` ends as a whole
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    server = Azurite(process=process, port=port, location=location, log=log, scheme="https" if tls else "http")
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if process.poll() is not None:
            server._stopped = True
            raise RuntimeError(
                f"Azurite ({executable}) exited with status {process.returncode} before accepting "
                f"connections on 127.0.0.1:{port}; its output:\n{server.log_tail()}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return server
        except OSError:
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(
                f"Azurite ({executable}) did not accept connections on 127.0.0.1:{port} within "
                f"{START_TIMEOUT:g} s; its output:\n{server.log_tail()}"
            )
        time.sleep(0.1)


def upload(
    connection_string: str,
    container: str,
    stores: Iterable[tuple[str, Path]],
    public: str | None = "container",
    ca: Path | None = None,
) -> None:
    """Create `container` and copy each local store folder to its blob prefix.

    `public` is the container's anonymous access level: "container" lets anyone list and
    read (as public scientific data is published), None keeps it private. `ca` is the
    certificate to trust when the server is on TLS.
    """
    from azure.storage.blob import BlobServiceClient

    extra = {"connection_verify": str(ca)} if ca is not None else {}
    service = BlobServiceClient.from_connection_string(connection_string, **extra)
    with service:
        client = service.create_container(container, public_access=public)
        files = [
            (f"{prefix}/{f.relative_to(root).as_posix()}", f)
            for prefix, root in stores
            for f in sorted(root.rglob("*"))
            if f.is_file()
        ]

        def put(item: tuple[str, Path]) -> None:
            name, path = item
            client.upload_blob(name, path.read_bytes(), overwrite=True)

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(put, files))
