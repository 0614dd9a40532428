"""Fixtures: a real `sandbox serve` (HTTP, /mcp) and the command line of a real `sandbox mcp`
(stdio), both on a scratch config and data directory, and connected official MCP SDK clients.

The binary comes from $SANDBOX_BIN, else target/debug/sandbox of this repository.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Iterator

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

REPO = Path(__file__).resolve().parents[4]
KEY_ALL = "mcp-test-key-all"
KEY_PY = "mcp-test-key-python-only"
CLIENT_INFO = Implementation(name="sandbox-mcp-tests", version="1.0")
LISTENING = re.compile(r"^listening on (http://127\.0\.0\.1:\d+) ")

# Installed environments are shared with the Rust tests (keyed by their spec's hash).
ENVIRONMENTS = os.environ.get("SANDBOX_TEST_ENVIRONMENTS", "/var/tmp/sandbox-test-environments")

CONFIG = f"""
[runtime]
environments_dir = "{ENVIRONMENTS}"

[[service.api_keys]]
name = "all"
sha256 = "{hashlib.sha256(KEY_ALL.encode()).hexdigest()}"

[[service.api_keys]]
name = "python-only"
sha256 = "{hashlib.sha256(KEY_PY.encode()).hexdigest()}"
profiles = ["python-default"]

[profiles.py-quick]
language = "python"
description = "2 s timeout"
[profiles.py-quick.limits]
timeout_ms = 2000
timeout_max_ms = 5000
grace_ms = 500
"""


def sandbox_bin() -> Path:
    env = os.environ.get("SANDBOX_BIN")
    path = Path(env) if env else REPO / "target" / "debug" / "sandbox"
    if not path.is_file():
        pytest.exit(f"sandbox binary not found at {path}; cargo build -p sandbox or set SANDBOX_BIN", 2)
    return path.resolve()


@dataclass
class Sandbox:
    """A scratch configuration and data directory, and the `sandbox serve` running on them."""

    root: Path
    config: Path
    data: Path
    url: str
    proc: "subprocess.Popen[bytes]"

    def stdio(self) -> StdioServerParameters:
        """`sandbox mcp` on the same configuration and data directory."""
        return StdioServerParameters(
            command=str(sandbox_bin()),
            args=["--config", str(self.config), "--data-dir", str(self.data), "mcp"],
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "USER": "mcp-tester", "SANDBOX_LOG": "warn"},
        )

    def executions_left(self) -> list[str]:
        # A warm profile's running template or waiting pooled sandbox is not an execution (as in
        # crates/sandbox/tests/it); a pooled sandbox that has taken one (its run file is in its
        # code directory, a template's child forked ahead: warm/code) is.
        d = self.data / "executions"

        def execution(n: str) -> bool:
            if n.startswith("template-"):
                return False
            taken = any((d / n / code / "_sandbox_run.json").exists() for code in ("code", "warm/code"))
            return not n.startswith("pool-") or taken

        return sorted(n for n in os.listdir(d) if execution(n)) if d.is_dir() else []

    def audit(self) -> list[dict]:
        """Every audit record, newest first (`sandbox audit list --json`)."""
        out = subprocess.run(
            [str(sandbox_bin()), "--config", str(self.config), "--data-dir", str(self.data), "audit", "list", "--json", "--limit", "1000"],
            check=True,
            capture_output=True,
        ).stdout
        return json.loads(out)["records"]


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    if os.geteuid() != 0:
        pytest.exit("these tests run real sandboxes and need root, as CI has", 2)
    root = Path(tempfile.mkdtemp(prefix="sandbox-mcp-test-"))
    os.chmod(root, 0o755)
    data = root / "data"
    data.mkdir()
    config = root / "config.toml"
    config.write_text(CONFIG)
    # A no-op when an earlier run installed it.
    subprocess.run([str(sandbox_bin()), "--config", str(config), "env", "install", "python-analysis"], check=True, capture_output=True)
    stderr = open(root / "serve.log", "wb")
    proc = subprocess.Popen(
        [str(sandbox_bin()), "--config", str(config), "--data-dir", str(data), "serve", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=stderr,
        env={**os.environ, "SANDBOX_LOG": "warn"},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    m = LISTENING.match(line)
    assert m, f"no address in {line!r}: {(root / 'serve.log').read_text()}"
    yield Sandbox(root=root, config=config, data=data, url=m.group(1), proc=proc)
    proc.terminate()
    proc.wait(timeout=60)
    stderr.close()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def http_client(key: str | None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0))


@contextlib.asynccontextmanager
async def connect(sandbox: Sandbox, transport: str, mode: str, key: str = KEY_ALL) -> AsyncIterator[Client]:
    """An official-SDK client on `transport` (`stdio` or `http`), negotiating with `mode`
    (`auto`: 2026-07-28 `server/discover`; `legacy`: the 2025-11-25 `initialize` handshake)."""
    if transport == "stdio":
        server = sandbox.stdio()
    else:
        server = streamable_http_client(f"{sandbox.url}/mcp", http_client=http_client(key))
    async with Client(server, mode=mode, client_info=CLIENT_INFO) as client:
        yield client


# Every protocol test runs on both transports and both protocol eras.
VARIANTS = [("stdio", "auto"), ("stdio", "legacy"), ("http", "auto"), ("http", "legacy")]


@pytest.fixture(params=VARIANTS, ids=[f"{t}-{m}" for t, m in VARIANTS])
async def client(request: pytest.FixtureRequest, sandbox: Sandbox) -> AsyncIterator[Client]:
    transport, mode = request.param
    async with connect(sandbox, transport, mode) as c:
        want = "2026-07-28" if mode == "auto" else "2025-11-25"
        assert c.protocol_version == want, f"{transport}/{mode} negotiated {c.protocol_version}"
        yield c
