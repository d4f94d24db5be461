"""A self-signed certificate for 127.0.0.1 and a token, for the tests of gpuobsd's --listen
port (openssl makes the certificate; a test without it is skipped)."""

from __future__ import annotations

import dataclasses
import secrets
import shutil
import subprocess
from pathlib import Path


@dataclasses.dataclass
class TcpAccess:
    cert: Path
    key: Path
    token_file: Path

    def daemon_flags(self, address: str) -> list[str]:
        return [
            "--listen",
            address,
            "--tls-cert",
            str(self.cert),
            "--tls-key",
            str(self.key),
            "--token-file",
            str(self.token_file),
        ]

    def client_flags(self) -> list[str]:
        return ["--tls-ca", str(self.cert), "--token-file", str(self.token_file)]


def make_tcp_access(folder: Path) -> TcpAccess:
    import pytest

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl not installed")
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    token_file = folder / "token"
    token_file.write_text(secrets.token_hex(24) + "\n")
    return TcpAccess(cert, key, token_file)
