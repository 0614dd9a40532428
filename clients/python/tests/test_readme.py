"""Runs the Python blocks of the READMEs (those marked ``<!-- doc-test: sdk-py -->``, see
crates/sandbox/tests/it/docs.rs) against a real `sandbox serve`: this package's README and the
repository README. The examples name ``http://127.0.0.1:8080`` without a key; here the clients
they build are pointed at the test server with its key. A fragment that uses names it does not
define (``code``, ``csv_text``) gets them from a prelude."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, List, Tuple

import pytest

import sandbox_client
from sandbox_client import AsyncSandboxClient, SandboxClient

from .conftest import API_KEY, CLIENT_DIR, Server

READMES = [CLIENT_DIR / "README.md", CLIENT_DIR.parent.parent / "README.md"]
MARKER = "<!-- doc-test: sdk-py -->"
PRELUDE = (
    "code = \"open('output.png', 'wb').write(b'png')\\nprint(open('data.csv').read())\"\n"
    "csv_text = 'a,b\\n1,2\\n'\n"
)


def blocks() -> List[Tuple[str, str]]:
    out = []
    for path in READMES:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() == MARKER:
                assert lines[i + 1].startswith("```python"), f"{path}:{i + 2}: {MARKER} must precede a ```python block"
                end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
                out.append((f"{path.name}:{i + 2}", "\n".join(lines[i + 2 : end]) + "\n"))
    return out


def test_there_are_blocks_to_run() -> None:
    assert len(blocks()) >= 3, blocks()


@pytest.mark.parametrize("where,source", blocks(), ids=[w for w, _ in blocks()])
def test_readme_block_runs(where: str, source: str, server: Server, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    class Sync(SandboxClient):
        def __init__(self, base_url: str, api_key: Any = None, **kwargs: Any) -> None:
            super().__init__(server.url, api_key=API_KEY, **{"timeout": 120, **kwargs})

    class Async(AsyncSandboxClient):
        def __init__(self, base_url: str, api_key: Any = None, **kwargs: Any) -> None:
            super().__init__(server.url, api_key=API_KEY, **{"timeout": 120, **kwargs})

    monkeypatch.setattr(sandbox_client, "SandboxClient", Sync)
    monkeypatch.setattr(sandbox_client, "AsyncSandboxClient", Async)
    namespace: dict = {"__name__": "__readme__", "SandboxClient": Sync, "AsyncSandboxClient": Async}
    fragment = "import" not in source
    exec(compile((PRELUDE if fragment else "") + source, where, "exec"), namespace)
    printed = capsys.readouterr().out
    if not fragment:
        assert printed.strip(), f"{where} printed nothing"
    if "profile=\"python-default\", code=\"print(6*7)\"" in source:
        assert "42" in printed, printed
    assert not re.search(r"Traceback", printed), printed
