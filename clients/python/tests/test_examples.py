"""The data-analyst example (examples/data-analyst) through the SDK, sync and async: the Palmer
penguins CSV in, statistics and a 1000 x 600 PNG chart out (Python), figures as returnData
(TypeScript, function harness). The environments are installed with `sandbox env install` into
the directory the Rust tests share ($SANDBOX_TEST_ENVIRONMENTS, else /var/tmp/sandbox-test-environments);
a second install is a no-op."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from sandbox_client import AsyncSandboxClient, SandboxClient

from .conftest import API_KEY, Server, sandbox_bin, start_server, stop_server

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "data-analyst"
ENVIRONMENTS = os.environ.get("SANDBOX_TEST_ENVIRONMENTS", "/var/tmp/sandbox-test-environments")


@pytest.fixture(scope="module")
def analysis_server() -> Iterator[Server]:
    head = f'[runtime]\nenvironments_dir = "{ENVIRONMENTS}"\n'
    s = start_server(head=head)
    cfg = s.root / "config.toml"
    for name in ("python-analysis", "typescript-analysis"):
        subprocess.run([str(sandbox_bin()), "--config", str(cfg), "env", "install", name], check=True, capture_output=True)
    yield s
    stop_server(s)


@pytest.fixture(scope="module")
def penguins() -> str:
    out = subprocess.run(["bash", str(EXAMPLE / "fetch-data.sh")], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip()).read_text()


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_python_example(analysis_server: Server, penguins: str) -> None:
    with SandboxClient(analysis_server.url, api_key=API_KEY, timeout=180) as c:
        r = c.execute(
            profile="python-analysis",
            code=(EXAMPLE / "analysis.py").read_text(),
            files={"data.csv": penguins},
            outputs=["*.png"],
        )
    assert r.status == "ok", r
    assert r.stdout.startswith("rows: 344, complete rows: 342\n"), r.stdout
    assert "pearson r(flipper_length_mm, body_mass_g) = 0.871202\n" in r.stdout
    assert "Gentoo               123  47.505  3.082" in r.stdout
    assert r.stderr == ""
    png = r.files["output.png"]
    assert png.mime_type == "image/png"
    assert png_size(png.data) == (1000, 600)


@pytest.mark.anyio
async def test_typescript_example_returns_figures(analysis_server: Server, penguins: str) -> None:
    async with AsyncSandboxClient(analysis_server.url, api_key=API_KEY, timeout=180) as c:
        r = await c.execute(
            profile="typescript-analysis",
            code=(EXAMPLE / "analysis.ts").read_text(),
            harness="function",
            files={"data.csv": penguins},
        )
    assert r.status == "ok", r
    d = r.return_data
    assert (d["rows"], d["completeRows"]) == (344, 342)
    assert sorted(d["species"]) == ["Adelie", "Chinstrap", "Gentoo"]
    assert d["species"]["Gentoo"]["body_mass_g"]["count"] == 123
    assert d["species"]["Gentoo"]["body_mass_g"]["mean"] == pytest.approx(5076.016260162602, rel=1e-12)
    assert d["flipperBodyMassR"] == pytest.approx(0.871202, abs=1e-6)


def test_structured_error_through_the_sdk(analysis_server: Server) -> None:
    with SandboxClient(analysis_server.url, api_key=API_KEY, timeout=60) as c:
        r = c.execute(profile="python-analysis", code="import pandas as pd\n\ndf = pd.DataFrame({'a': [1]})\nprint(df['b'])\n")
    assert r.status == "error"
    assert r.error is not None
    assert (r.error.type, r.error.line) == ("KeyError", 4), r.error
    assert "line 4" in (r.error.traceback or "")
