"""The SSE parser and stream handling, offline (httpx.MockTransport)."""

from __future__ import annotations

import json
from typing import Any, Iterator, List, Optional, Tuple

import httpx
import pytest

from sandbox_client import SandboxClient, SandboxError, StreamChunk, StreamResult
from sandbox_client._sse import SSEDecoder, split_lines

RESULT = {
    "executionId": "id-1",
    "status": "ok",
    "profile": "python-default",
    "language": "python",
    "stdout": "a\u2028b\n",
    "stderr": "",
    "exitCode": 0,
    "durationMs": 5,
    "timedOut": False,
    "oomKilled": False,
    "stdoutTruncated": False,
    "stderrTruncated": False,
    "files": {},
    "killedAtTeardown": 0,
    "resourceUsage": {"cpuTimeMs": 1, "peakMemoryBytes": 2},
    "timing": {"queueMs": 0, "setupMs": 1, "runMs": 2, "collectMs": 1},
}


def decode_all(text: str) -> List[Tuple[str, str, Optional[str]]]:
    d = SSEDecoder()
    lines, rest = split_lines(text)
    out = []
    for line in lines:
        ev = d.decode(line)
        if ev is not None:
            out.append((ev.event, ev.data, ev.id))
    return out


def test_sse_decoder_spec_cases() -> None:
    text = (
        "\ufeff: comment\n"
        "event: stdout\ndata: {\"text\": \"1\"}\n\n"
        "data:first\ndata: second\nid: 7\n\n"
        "event: x\n\n"  # no data: not dispatched
        "event:y\r\ndata\r\n\r\n"  # a field with no colon: empty value
        "retry: 10\rdata: cr\r\r\n"
    )
    assert decode_all(text) == [
        ("stdout", '{"text": "1"}', None),
        ("message", "first\nsecond", "7"),
        ("y", "", "7"),
        ("message", "cr", "7"),
    ]


def test_split_lines_keeps_trailing_cr() -> None:
    assert split_lines("a\r") == ([], "a\r")
    assert split_lines("a\r\nb") == (["a"], "b")
    assert split_lines("x\u2028y\n") == (["x\u2028y"], "")


def sse_body(events: List[Tuple[str, Any]], chunk: int) -> Iterator[bytes]:
    raw = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()
    for i in range(0, len(raw), chunk):
        yield raw[i : i + chunk]


class _Body(httpx.SyncByteStream):
    def __init__(self, parts: Iterator[bytes]) -> None:
        self.parts = parts
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self.parts

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("chunk", [1, 3, 7, 1000])
def test_stream_reassembles_events_split_anywhere(chunk: int) -> None:
    events = [("stdout", {"text": "h\u00e9\u2028"}), ("stderr", {"text": "e"}), ("result", RESULT)]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["accept"] == "text/event-stream"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=_Body(sse_body(events, chunk)))

    with SandboxClient("http://sandbox.test", transport=httpx.MockTransport(handler)) as c:
        got = list(c.execute_stream(profile="python-default", code="x"))
    assert got[:2] == [StreamChunk("stdout", "h\u00e9\u2028"), StreamChunk("stderr", "e")]
    assert isinstance(got[2], StreamResult) and got[2].result.stdout == "a\u2028b\n"
    assert len(got) == 3


def test_stream_error_event_raises() -> None:
    problem = {"type": "urn:sandbox:error:internal_error", "title": "Internal error", "status": 500,
               "code": "internal_error", "detail": "boom"}
    body = _Body(sse_body([("stdout", {"text": "a"}), ("error", problem)], 1000))

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

    with SandboxClient("http://sandbox.test", transport=httpx.MockTransport(handler)) as c:
        s = c.execute_stream(profile="p", code="x")
        assert next(s) == StreamChunk("stdout", "a")
        with pytest.raises(SandboxError) as ei:
            next(s)
    assert ei.value.code == "internal_error" and ei.value.detail == "boom"
    assert body.closed


def test_stream_without_result_is_a_protocol_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=_Body(sse_body([("stdout", {"text": "a"})], 1000)))

    with SandboxClient("http://sandbox.test", transport=httpx.MockTransport(handler)) as c:
        with pytest.raises(SandboxError) as ei:
            list(c.execute_stream(profile="p", code="x"))
    assert ei.value.code == "protocol_error"


def test_rejected_result_in_stream_raises() -> None:
    rejected = dict(RESULT, status="rejected", error={"type": "invalid_env", "message": "bad env", "field": "env"})

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              stream=_Body(sse_body([("result", rejected)], 1000)))

    with SandboxClient("http://sandbox.test", transport=httpx.MockTransport(handler)) as c:
        with pytest.raises(SandboxError) as ei:
            list(c.execute_stream(profile="p", code="x"))
    assert ei.value.code == "invalid_env" and ei.value.field == "env" and ei.value.execution_id == "id-1"


def test_close_closes_the_response() -> None:
    def forever() -> Iterator[bytes]:
        while True:
            yield b'event: stdout\ndata: {"text": "t"}\n\n'

    body = _Body(forever())

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

    with SandboxClient("http://sandbox.test", transport=httpx.MockTransport(handler)) as c:
        s = c.execute_stream(profile="p", code="x")
        for i, ev in enumerate(s):
            if i == 3:
                break
        s.close()
        assert body.closed
        assert list(s) == []


def test_non_problem_error_and_retry_after_date() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(502, headers={"content-type": "text/html", "retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"},
                              text="<h1>Bad gateway</h1>")

    with SandboxClient("http://sandbox.test", transport=httpx.MockTransport(handler)) as c:
        with pytest.raises(SandboxError) as ei:
            c.execute(profile="p", code="x")
    assert ei.value.code == "unexpected_response" and ei.value.status == 502
    assert ei.value.retry_after == 0.0


def test_request_body_encoding() -> None:
    seen = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.update(json.loads(request.content))
        seen["auth"] = request.headers.get("authorization")
        return httpx.Response(200, json=RESULT)

    with SandboxClient("http://sandbox.test/", api_key="k", transport=httpx.MockTransport(handler)) as c:
        r = c.execute(profile="p", code="c", language="python", timeout_ms=1500, files={"t.txt": "tx", "b.bin": b"\x00\xff"},
                      outputs=["*.png"], stdin=b"in", env={"A": "1"})
    assert r.execution_id == "id-1"
    assert seen == {
        "profile": "p", "code": "c", "language": "python", "timeout": 1500,
        "files": {"t.txt": "tx", "b.bin": {"base64": "AP8="}}, "outputs": ["*.png"],
        "stdin": {"base64": "aW4="}, "env": {"A": "1"}, "auth": "Bearer k",
    }
