"""Error codes through a real server."""

from __future__ import annotations

import threading
import time
from typing import List

import httpx
import pytest

from sandbox_client import SandboxClient, SandboxError, StreamChunk

from .conftest import API_KEY, PY_ONLY_KEY, Server


def test_invalid_file_name_has_field(client: SandboxClient) -> None:
    with pytest.raises(SandboxError) as ei:
        client.execute(profile="python-default", code="print(1)", files={"../escape.txt": "x"})
    e = ei.value
    assert e.code == "invalid_file_name"
    assert e.status == 400
    assert e.field == 'files["../escape.txt"]'
    assert "escape.txt" in e.detail


def test_invalid_file_name_on_stream(client: SandboxClient) -> None:
    with pytest.raises(SandboxError) as ei:
        with client.execute_stream(profile="python-default", code="print(1)", files={"/abs": "x"}):
            pass
    assert ei.value.code == "invalid_file_name"
    assert ei.value.field is not None


def test_profile_not_found(client: SandboxClient) -> None:
    with pytest.raises(SandboxError) as ei:
        client.execute(profile="no-such-profile", code="print(1)")
    assert ei.value.code == "profile_not_found"
    assert ei.value.status == 404
    assert ei.value.field == "profile"
    with pytest.raises(SandboxError) as ei:
        client.profile("no-such-profile")
    assert ei.value.code == "profile_not_found"
    assert ei.value.status == 404


def test_timeout_too_large(client: SandboxClient) -> None:
    limit = client.profile("python-default").timeout_max_ms
    with pytest.raises(SandboxError) as ei:
        client.execute(profile="python-default", code="print(1)", timeout_ms=limit + 1)
    assert ei.value.code == "timeout_too_large"
    assert ei.value.status == 400
    assert ei.value.field == "timeout"


def test_empty_code(client: SandboxClient) -> None:
    with pytest.raises(SandboxError) as ei:
        client.execute(profile="python-default", code="")
    assert ei.value.code == "empty_code"


def test_unsupported_language(client: SandboxClient) -> None:
    with pytest.raises(SandboxError) as ei:
        client.execute(profile="python-default", language="typescript", code="console.log(1)")
    assert ei.value.code == "unsupported_language"
    assert ei.value.status == 400


@pytest.mark.parametrize("key", [None, "wrong-key"])
def test_unauthorized(server: Server, key: "str | None") -> None:
    with SandboxClient(server.url, api_key=key) as c:
        with pytest.raises(SandboxError) as ei:
            c.execute(profile="python-default", code="print(1)")
        assert ei.value.code == "unauthorized"
        assert ei.value.status == 401
        with pytest.raises(SandboxError) as ei:
            c.profiles()
        assert ei.value.code == "unauthorized"
        with pytest.raises(SandboxError) as ei:
            list(c.execute_stream(profile="python-default", code="print(1)"))
        assert ei.value.code == "unauthorized"


def test_forbidden_profile(server: Server) -> None:
    with SandboxClient(server.url, api_key=PY_ONLY_KEY) as c:
        with pytest.raises(SandboxError) as ei:
            c.execute(profile="typescript-default", code="console.log(1)")
        assert ei.value.code == "forbidden_profile"
        assert ei.value.status == 403
        with pytest.raises(SandboxError) as ei:
            c.profile("typescript-default")
        assert ei.value.code == "forbidden_profile"
        assert [p.name for p in c.profiles()] == ["python-default"]
        assert c.execute(profile="python-default", code="print(1)").stdout == "1\n"


def test_queue_full(queue_server: Server) -> None:
    with SandboxClient(queue_server.url, api_key=API_KEY, timeout=60) as c:
        results: List[object] = []
        started = threading.Event()

        def occupy() -> None:
            try:
                with c.execute_stream(
                    profile="python-default", code="import time\nprint('in', flush=True)\ntime.sleep(3)"
                ) as s:
                    for ev in s:
                        if isinstance(ev, StreamChunk):
                            started.set()
                    results.append(s.result)
            except BaseException as e:  # pragma: no cover - reported below
                results.append(e)
                started.set()

        t = threading.Thread(target=occupy)
        t.start()
        assert started.wait(30), "the first execution never started"
        with pytest.raises(SandboxError) as ei:
            c.execute(profile="python-default", code="print(2)")
        t.join(60)
        e = ei.value
        assert e.code == "queue_full"
        assert e.status == 429
        assert e.retry_after is not None and e.retry_after >= 0
        assert len(results) == 1 and getattr(results[0], "status", None) == "ok", results


def test_queue_full_two_concurrent_plain_executions(queue_server: Server) -> None:
    """Two concurrent executions, nothing else: exactly one gets queue_full."""
    outcomes: List[object] = []
    barrier = threading.Barrier(2)

    def run() -> None:
        with SandboxClient(queue_server.url, api_key=API_KEY, timeout=60) as c:
            barrier.wait()
            try:
                outcomes.append(c.execute(profile="python-default", code="import time\ntime.sleep(2)\nprint('done')"))
            except SandboxError as e:
                outcomes.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    errors = [o for o in outcomes if isinstance(o, SandboxError)]
    oks = [o for o in outcomes if not isinstance(o, SandboxError)]
    assert len(errors) == 1 and len(oks) == 1, outcomes
    assert errors[0].code == "queue_full" and errors[0].retry_after is not None
    assert getattr(oks[0], "stdout") == "done\n"


def test_body_too_large(small_body_server: Server) -> None:
    with SandboxClient(small_body_server.url, api_key=API_KEY) as c:
        assert c.execute(profile="python-default", code="print(1)").stdout == "1\n"
        with pytest.raises(SandboxError) as ei:
            c.execute(profile="python-default", code="print(1)\n" + "#" * 4096)
        assert ei.value.code == "body_too_large"
        assert ei.value.status == 413


def test_invalid_request_malformed_json(server: Server) -> None:
    r = httpx.post(
        f"{server.url}/v1/executions",
        content=b'{"profile": "python-default", "code": ',
        headers={"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"},
    )
    assert r.status_code == 400
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["code"] == "invalid_request"
    e = SandboxError.from_problem(body, status=r.status_code)
    assert e.code == "invalid_request" and e.status == 400


def test_unknown_field_is_invalid_request(server: Server) -> None:
    r = httpx.post(
        f"{server.url}/v1/executions",
        json={"profile": "python-default", "code": "print(1)", "bogus": 1},
        headers={"Authorization": f"Bearer {API_KEY}"},
    )
    assert r.status_code == 400
    assert r.json()["code"] == "invalid_request"


def test_connection_error() -> None:
    with SandboxClient("http://127.0.0.1:9", timeout=5) as c:
        with pytest.raises(SandboxError) as ei:
            c.profiles()
    assert ei.value.code == "connection_error"
    assert ei.value.status is None
    assert isinstance(ei.value.__cause__, httpx.HTTPError)


def test_invalid_output_pattern_and_timeout(client: SandboxClient) -> None:
    with pytest.raises(SandboxError) as ei:
        client.execute(profile="python-default", code="print(1)", outputs=["["])
    assert ei.value.code == "invalid_output_pattern" and ei.value.field == "outputs[0]"
    with pytest.raises(SandboxError) as ei:
        client.execute(profile="python-default", code="print(1)", timeout_ms=0)
    assert ei.value.code == "invalid_timeout" and ei.value.field == "timeout"
