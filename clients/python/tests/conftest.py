"""Starts real `sandbox serve` processes for the tests.

The binary comes from $SANDBOX_BIN, else ../../target/debug/sandbox relative to clients/python.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Iterator, List

import pytest

from sandbox_client import AsyncSandboxClient, SandboxClient

CLIENT_DIR = Path(__file__).resolve().parents[1]
API_KEY = "sk-test-" + "a1b2c3d4e5f6"  # may use both built-in profiles
PY_ONLY_KEY = "sk-test-python-only"  # may use python-default only

LISTENING = re.compile(r"^listening on (http://127\.0\.0\.1:\d+) \((\d+) execution slots\)$")


def sandbox_bin() -> Path:
    env = os.environ.get("SANDBOX_BIN")
    path = Path(env) if env else CLIENT_DIR / ".." / ".." / "target" / "debug" / "sandbox"
    path = path.resolve()
    if not path.is_file():
        pytest.exit(f"sandbox binary not found at {path}; build it (cargo build -p sandbox) or set SANDBOX_BIN", 2)
    return path


def sha256_hex(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def config_text(service_extra: str = "", head: str = "") -> str:
    return f"""{head}
[service]
{service_extra}
[[service.api_keys]]
name = "test"
sha256 = "{sha256_hex(API_KEY)}"
profiles = ["python-default", "typescript-default", "python-analysis", "typescript-analysis"]

[[service.api_keys]]
name = "python-only"
sha256 = "{sha256_hex(PY_ONLY_KEY)}"
profiles = ["python-default"]
"""


@dataclass
class Server:
    url: str
    slots: int
    proc: "subprocess.Popen[bytes]"
    root: Path

    def stderr_text(self) -> str:
        try:
            return (self.root / "stderr.log").read_text(errors="replace")
        except OSError:
            return ""


def start_server(service_extra: str = "", head: str = "") -> Server:
    root = Path(tempfile.mkdtemp(prefix="sandbox-client-test-"))
    data = root / "data"
    data.mkdir()
    os.chmod(root, 0o755)
    os.chmod(data, 0o755)
    cfg = root / "config.toml"
    cfg.write_text(config_text(service_extra, head))
    stderr = open(root / "stderr.log", "wb")
    proc = subprocess.Popen(
        [str(sandbox_bin()), "--data-dir", str(data), "--config", str(cfg), "serve", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=stderr,
        stdin=subprocess.DEVNULL,
    )
    stderr.close()
    line: List[bytes] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(60)
    first = line[0].decode(errors="replace").strip() if line else ""
    m = LISTENING.match(first)
    if not m:
        proc.kill()
        proc.wait()
        err = (root / "stderr.log").read_text(errors="replace")
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"server did not start: stdout {first!r}; stderr:\n{err}")
    return Server(url=m.group(1), slots=int(m.group(2)), proc=proc, root=root)


def stop_server(server: Server) -> None:
    server.proc.terminate()
    try:
        server.proc.wait(15)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait()
    if server.proc.stdout is not None:
        server.proc.stdout.close()
    shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = start_server()
    yield s
    stop_server(s)


@pytest.fixture(scope="session")
def queue_server() -> Iterator[Server]:
    """One execution slot and no queue."""
    s = start_server("max_concurrency = 1\nqueue_max = 0")
    yield s
    stop_server(s)


@pytest.fixture(scope="session")
def small_body_server() -> Iterator[Server]:
    s = start_server("body_max_bytes = 2048")
    yield s
    stop_server(s)


@pytest.fixture
def client(server: Server) -> Iterator[SandboxClient]:
    with SandboxClient(server.url, api_key=API_KEY, timeout=120) as c:
        yield c


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def aclient(server: Server) -> AsyncIterator[AsyncSandboxClient]:
    async with AsyncSandboxClient(server.url, api_key=API_KEY, timeout=120) as c:
        yield c
