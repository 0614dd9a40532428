"""One request shape across the doors: `profile` optional (the same default rule as the HTTP API,
the CLI and MCP), `timeout` in milliseconds (`timeout_ms` its older name), and a timeout that is
almost surely seconds refused with a hint, through a real server."""

from __future__ import annotations

import pytest

from sandbox_client import AsyncSandboxClient, SandboxClient, SandboxError

from .conftest import PY_ONLY_KEY, Server


def test_profile_is_optional(client: SandboxClient, server: Server) -> None:
    r = client.execute(code="print(6*7)")
    assert (r.status, r.profile, r.stdout) == ("ok", "python-default", "42\n")
    r = client.execute(language="typescript", code="console.log(6*7)")
    assert (r.status, r.profile, r.stdout) == ("ok", "typescript-default", "42\n")
    with SandboxClient(server.url, api_key=PY_ONLY_KEY) as py_only:
        with pytest.raises(SandboxError) as ei:
            py_only.execute(language="typescript", code="1")
    assert (ei.value.code, ei.value.field) == ("profile_not_found", "profile")


def test_timeout_is_milliseconds_under_both_names(client: SandboxClient) -> None:
    for kwargs in ({"timeout": 20}, {"timeout_ms": 20}):
        with pytest.raises(SandboxError) as ei:
            client.execute(code="print(1)", **kwargs)
        assert (ei.value.code, ei.value.status, ei.value.field) == ("invalid_timeout", 400, "timeout")
        assert "milliseconds (for 20 seconds, send 20000)" in ei.value.detail
    assert client.execute(code="print(1)", timeout=20_000).status == "ok"
    assert client.execute(code="print(1)", timeout_ms=20_000).status == "ok"
    with pytest.raises(TypeError, match="give one"):
        client.execute(code="print(1)", timeout=1000, timeout_ms=2000)
    with pytest.raises(TypeError, match="code is required"):
        client.execute(profile="python-default")


@pytest.mark.anyio
async def test_async_client_has_the_same_shape(aclient: AsyncSandboxClient) -> None:
    r = await aclient.execute(code="print(6*7)", timeout=20_000)
    assert (r.status, r.profile) == ("ok", "python-default")
    with pytest.raises(SandboxError) as ei:
        await aclient.execute(code="print(1)", timeout=5)
    assert ei.value.code == "invalid_timeout"
