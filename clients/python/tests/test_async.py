"""The asynchronous client against a real server."""

from __future__ import annotations

import time

import anyio
import pytest

from sandbox_client import AsyncSandboxClient, SandboxError, StreamChunk, StreamResult

from .conftest import API_KEY, Server

pytestmark = pytest.mark.anyio


async def test_async_python_and_typescript(aclient: AsyncSandboxClient) -> None:
    r = await aclient.execute(profile="python-default", code="print(6*7)")
    assert r.status == "ok" and r.stdout == "42\n" and r.exit_code == 0
    r = await aclient.execute(profile="typescript-default", code="const n: number = 7; console.log(n * 6)")
    assert r.status == "ok" and r.stdout == "42\n"


async def test_async_files_round_trip(aclient: AsyncSandboxClient) -> None:
    r = await aclient.execute(
        profile="python-default",
        code="d = open('in.bin','rb').read()\nopen('out.bin','wb').write(d[::-1] + bytes(range(256)))",
        files={"in.bin": b"\x01\x02\x03"},
    )
    assert r.status == "ok", r.stderr
    assert r.files["out.bin"].data == b"\x03\x02\x01" + bytes(range(256))


async def test_async_concurrent(aclient: AsyncSandboxClient) -> None:
    out = {}

    async def one(i: int) -> None:
        out[i] = (await aclient.execute(profile="python-default", code=f"print({i})")).stdout

    async with anyio.create_task_group() as tg:
        for i in range(2):
            tg.start_soon(one, i)
    assert out == {0: "0\n", 1: "1\n"}


async def test_async_timeout_and_exit_code(aclient: AsyncSandboxClient) -> None:
    r = await aclient.execute(profile="python-default", code="while True: pass", timeout_ms=1000)
    assert r.status == "timeout" and r.timed_out
    r = await aclient.execute(profile="python-default", code="raise SystemExit(5)")
    assert r.exit_code == 5 and r.status == "error"


async def test_async_streaming(aclient: AsyncSandboxClient) -> None:
    code = "import time\nfor i in range(6):\n    print(i, flush=True)\n    time.sleep(0.2)\n"
    started = time.monotonic()
    first = None
    final = None
    text = ""
    async with aclient.execute_stream(profile="python-default", code=code) as stream:
        async for ev in stream:
            if isinstance(ev, StreamChunk):
                first = first if first is not None else time.monotonic() - started
                text += ev.text
            else:
                assert isinstance(ev, StreamResult)
                final = time.monotonic() - started
                result = ev.result
    assert first is not None and final is not None
    assert final - first > 0.6
    assert text == result.stdout == "".join(f"{i}\n" for i in range(6))
    assert stream.response is not None and stream.response.is_closed


async def test_async_stream_close_early(aclient: AsyncSandboxClient) -> None:
    stream = aclient.execute_stream(profile="python-default", code="import time\nwhile True:\n    print('x', flush=True)\n    time.sleep(0.05)")
    ev = await stream.__anext__()
    assert isinstance(ev, StreamChunk)
    await stream.aclose()
    assert stream.response is not None and stream.response.is_closed
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


async def test_async_profiles(aclient: AsyncSandboxClient) -> None:
    names = [p.name for p in await aclient.profiles()]
    assert "python-default" in names
    assert (await aclient.profile("typescript-default")).language == "typescript"


async def test_async_errors(server: Server, aclient: AsyncSandboxClient) -> None:
    with pytest.raises(SandboxError) as ei:
        await aclient.execute(profile="python-default", code="print(1)", files={"a/../../b": "x"})
    assert ei.value.code == "invalid_file_name" and ei.value.field
    with pytest.raises(SandboxError) as ei:
        await aclient.execute(profile="nope", code="print(1)")
    assert ei.value.code == "profile_not_found"
    async with AsyncSandboxClient(server.url, api_key="bad") as bad:
        with pytest.raises(SandboxError) as ei:
            async for _ in bad.execute_stream(profile="python-default", code="print(1)"):
                pass
        assert ei.value.code == "unauthorized" and ei.value.status == 401
    async with AsyncSandboxClient(server.url, api_key=API_KEY) as c:
        with pytest.raises(SandboxError) as ei:
            await c.execute(profile="python-default", code="1", timeout_ms=10**9)
        assert ei.value.code == "timeout_too_large"
