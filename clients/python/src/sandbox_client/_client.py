"""The synchronous and asynchronous clients."""

from __future__ import annotations

import base64
import codecs
import json
from collections import deque
from types import TracebackType
from typing import Any, AsyncIterator, Deque, Dict, Iterator, List, Mapping, Optional, Sequence, Type, Union
from urllib.parse import quote

import httpx

from ._errors import SandboxError, error_from_response, transport_error
from ._models import ExecutionResult, FileInput, ProfileInfo, StreamChunk, StreamEvent, StreamResult
from ._sse import SSEDecoder, ServerSentEvent, split_lines

__all__ = ["SandboxClient", "AsyncSandboxClient", "ExecutionStream", "AsyncExecutionStream", "DEFAULT_TIMEOUT"]

__version__ = "0.1.0"

DEFAULT_TIMEOUT = httpx.Timeout(330.0, connect=10.0)
"""Reads may wait up to 330 s: above the longest timeout the built-in profiles allow (300 s)."""

TimeoutTypes = Union[float, httpx.Timeout, None]

_FAILED_STATUSES = ("rejected", "internal_error")


# ---------------------------------------------------------------------------------------------
# Request building and response handling shared by both clients (no I/O here).


def _encode_content(value: FileInput, where: str) -> Union[str, Dict[str, str]]:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"base64": base64.b64encode(bytes(value)).decode("ascii")}
    raise TypeError(f"{where} must be str or bytes, not {type(value).__name__}")


def _build_body(
    profile: Optional[str],
    code: Optional[str],
    language: Optional[str],
    timeout: Optional[int],
    timeout_ms: Optional[int],
    files: Optional[Mapping[str, FileInput]],
    outputs: Optional[Sequence[str]],
    stdin: Optional[FileInput],
    env: Optional[Mapping[str, str]],
    harness: Optional[str],
    input: Any,
) -> Dict[str, Any]:
    if isinstance(outputs, str):
        raise TypeError("outputs must be a list of glob patterns, not a single string")
    if code is None:
        raise TypeError("code is required: execute(code=...) (profile is optional)")
    if timeout is not None and timeout_ms is not None and timeout != timeout_ms:
        raise TypeError("timeout and timeout_ms are two names of one argument (milliseconds); give one")
    if timeout is None:
        timeout = timeout_ms
    body: Dict[str, Any] = {"code": code}
    if profile is not None:
        body["profile"] = profile
    if language is not None:
        body["language"] = language
    if harness is not None:
        body["harness"] = harness
    if input is not None:
        body["input"] = input
    if timeout is not None:
        body["timeout"] = int(timeout)
    if files is not None:
        body["files"] = {name: _encode_content(content, f"files[{name!r}]") for name, content in files.items()}
    if outputs is not None:
        body["outputs"] = list(outputs)
    if stdin is not None:
        body["stdin"] = _encode_content(stdin, "stdin")
    if env is not None:
        body["env"] = dict(env)
    return body


def _headers(api_key: Optional[str], extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
    h = {"User-Agent": f"sandbox-client-python/{__version__}", "Accept": "application/json"}
    if extra:
        h.update(extra)
    if api_key is not None:
        h["Authorization"] = f"Bearer {api_key}"
    return h


def _timeout(timeout: TimeoutTypes) -> httpx.Timeout:
    if isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(timeout)


def _json_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as e:
        raise SandboxError(
            "protocol_error", f"the response is not JSON: {e}", status=response.status_code
        ) from None


def _check_result(result: ExecutionResult) -> ExecutionResult:
    """A result that says the request was rejected or the service failed becomes an error, so the
    streaming and non-streaming paths fail the same way."""
    if result.status in _FAILED_STATUSES:
        err = result.error
        raise SandboxError(
            err.type if err else ("internal_error" if result.status == "internal_error" else "invalid_request"),
            err.message if err else f"execution {result.status}",
            field=err.field if err else None,
            execution_id=result.execution_id,
        )
    return result


def _parse_result(data: Any, status: Optional[int] = None) -> ExecutionResult:
    if not isinstance(data, dict):
        raise SandboxError("protocol_error", "the result is not a JSON object", status=status)
    try:
        result = ExecutionResult.from_json(data)
    except (KeyError, TypeError, ValueError) as e:
        raise SandboxError("protocol_error", f"malformed result object: {e!r}", status=status) from None
    return _check_result(result)


def _parse_profile(data: Any) -> ProfileInfo:
    try:
        return ProfileInfo.from_json(data)
    except (KeyError, TypeError, ValueError) as e:
        raise SandboxError("protocol_error", f"malformed profile object: {e!r}") from None


def _parse_profiles(data: Any) -> List[ProfileInfo]:
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), list):
        raise SandboxError("protocol_error", "malformed profile list")
    return [_parse_profile(p) for p in data["profiles"]]


class _EventParser:
    """Bytes of a `text/event-stream` body in, :class:`StreamEvent` objects out."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._sse = SSEDecoder()
        self._rest = ""
        self.result: Optional[ExecutionResult] = None

    def feed(self, data: bytes) -> List[Union[StreamEvent, SandboxError]]:
        """The events completed by ``data``; an error (an ``error`` event, a malformed event) comes
        last in the list, after the events that preceded it."""
        lines, self._rest = split_lines(self._rest + self._utf8.decode(data))
        return self._lines(lines)

    def _lines(self, lines: List[str]) -> List[Union[StreamEvent, SandboxError]]:
        out: List[Union[StreamEvent, SandboxError]] = []
        for line in lines:
            ev = self._sse.decode(line)
            if ev is None:
                continue
            try:
                converted = self._convert(ev)
            except SandboxError as e:
                out.append(e)
                break
            if converted is not None:
                out.append(converted)
        return out

    def end(self) -> List[Union[StreamEvent, SandboxError]]:
        """At end of body. A final CR completes its line; an event not closed by a blank line is
        discarded, as the SSE specification says."""
        out = self.feed(b"")
        tail = self._rest + self._utf8.decode(b"", final=True)
        self._rest = ""
        if tail.endswith("\r"):
            out.extend(self._lines(split_lines(tail[:-1] + "\n")[0]))
        return out

    def _convert(self, ev: ServerSentEvent) -> Optional[StreamEvent]:
        if self.result is not None:
            return None  # nothing is expected after the result
        if ev.event in ("stdout", "stderr"):
            try:
                text = json.loads(ev.data)["text"]
            except (ValueError, KeyError, TypeError) as e:
                raise SandboxError("protocol_error", f"malformed {ev.event} event: {e!r}") from None
            return StreamChunk(stream=ev.event, text=str(text))  # type: ignore[arg-type]
        if ev.event == "result":
            try:
                data = json.loads(ev.data)
            except ValueError as e:
                raise SandboxError("protocol_error", f"malformed result event: {e}") from None
            result = _parse_result(data)
            self.result = result
            return StreamResult(result)
        if ev.event == "error":
            try:
                problem = json.loads(ev.data)
            except ValueError:
                problem = None
            if isinstance(problem, dict):
                raise SandboxError.from_problem(problem)
            raise SandboxError("internal_error", ev.data or "the stream reported an error")
        return None  # unknown event types are ignored, for forward compatibility


def _incomplete() -> SandboxError:
    return SandboxError("protocol_error", "the event stream ended without a result")


def _is_event_stream(response: httpx.Response) -> bool:
    ctype = str(response.headers.get("content-type", ""))
    return ctype.split(";")[0].strip().lower() == "text/event-stream"


# ---------------------------------------------------------------------------------------------
# Synchronous


class ExecutionStream(Iterator[StreamEvent]):
    """Iterator over one streamed execution: :class:`StreamChunk` items as the program writes, then
    one :class:`StreamResult`. The request is sent on the first ``next()`` (or on ``with``).

    Closing it (``close()``, leaving a ``with`` block, or reaching the end) closes the HTTP response;
    the server then stops the execution if it was still running.
    """

    def __init__(self, client: httpx.Client, request: httpx.Request) -> None:
        self._client = client
        self._request = request
        self._response: Optional[httpx.Response] = None
        self._chunks: Optional[Iterator[bytes]] = None
        self._parser = _EventParser()
        self._pending: Deque[Union[StreamEvent, SandboxError]] = deque()
        self._finished = False
        self._closed = False

    @property
    def result(self) -> Optional[ExecutionResult]:
        """The result, once the stream has delivered it."""
        return self._parser.result

    @property
    def response(self) -> Optional[httpx.Response]:
        """The underlying HTTP response, once sent."""
        return self._response

    def open(self) -> "ExecutionStream":
        """Send the request now (raises :class:`SandboxError` if the service refuses it)."""
        if self._response is not None or self._closed:
            return self
        try:
            response = self._client.send(self._request, stream=True)
        except httpx.HTTPError as e:
            self._closed = True
            raise transport_error(e) from e
        self._response = response
        try:
            if response.status_code >= 400:
                raise error_from_response(response, response.read())
            if not _is_event_stream(response):
                # A server (or proxy) that answered with the plain JSON result.
                response.read()
                result = _parse_result(_json_body(response), response.status_code)
                self._pending.append(StreamResult(result))
                self._parser.result = result
                self._finished = True
                self._close_response()
                return self
            self._chunks = response.iter_bytes()
        except httpx.HTTPError as e:
            self.close()
            raise transport_error(e) from e
        except BaseException:
            self.close()
            raise
        return self

    def __iter__(self) -> "ExecutionStream":
        return self

    def __next__(self) -> StreamEvent:
        if self._response is None and not self._closed:
            self.open()
        while True:
            if self._pending:
                item = self._pending.popleft()
                if isinstance(item, SandboxError):
                    self.close()
                    raise item
                return item
            if self._finished or self._closed or self._chunks is None:
                self._close_response()
                raise StopIteration
            try:
                try:
                    data = next(self._chunks)
                except StopIteration:
                    items = self._parser.end()
                    if self._parser.result is None and not any(isinstance(i, SandboxError) for i in items):
                        items.append(_incomplete())
                    self._pending.extend(items)
                    self._finished = True
                    self._close_response()
                    continue
                items = self._parser.feed(data)
                self._pending.extend(items)
                if self._parser.result is not None or any(isinstance(i, SandboxError) for i in items):
                    self._finished = True
                    self._close_response()
            except httpx.HTTPError as e:
                self.close()
                raise transport_error(e) from e
            except BaseException:
                self.close()
                raise

    def until_result(self) -> ExecutionResult:
        """Consume the rest of the stream and return the result."""
        for _ in self:
            pass
        if self.result is None:  # pragma: no cover - __next__ raises first
            raise _incomplete()
        return self.result

    def _close_response(self) -> None:
        if self._response is not None and not self._response.is_closed:
            self._response.close()

    def close(self) -> None:
        """Close the HTTP response; further iteration stops."""
        self._closed = True
        self._pending.clear()
        self._close_response()

    def __enter__(self) -> "ExecutionStream":
        return self.open()

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._close_response()
        except Exception:  # pragma: no cover
            pass


class SandboxClient:
    """Synchronous client of the Sandbox Service.

    >>> with SandboxClient("http://127.0.0.1:8080", api_key="...") as sb:
    ...     print(sb.execute(profile="python-default", code="print(6*7)").stdout)
    """

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        timeout: TimeoutTypes = DEFAULT_TIMEOUT,
        *,
        headers: Optional[Mapping[str, str]] = None,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url, headers=_headers(api_key, headers), timeout=_timeout(timeout), transport=transport
        )

    @property
    def http(self) -> httpx.Client:
        """The underlying ``httpx.Client``."""
        return self._http

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise transport_error(e) from e
        if response.status_code >= 400:
            raise error_from_response(response, response.content)
        return response

    def execute(
        self,
        profile: Optional[str] = None,
        code: Optional[str] = None,
        *,
        language: Optional[str] = None,
        timeout: Optional[int] = None,
        timeout_ms: Optional[int] = None,
        files: Optional[Mapping[str, FileInput]] = None,
        outputs: Optional[Sequence[str]] = None,
        stdin: Optional[FileInput] = None,
        env: Optional[Mapping[str, str]] = None,
        harness: Optional[str] = None,
        input: Any = None,
    ) -> ExecutionResult:
        """Run ``code`` under ``profile`` and wait for the result.

        ``profile`` is optional: the service then picks ``<language>-default`` when the key may
        use it, else the first profile of that language the key may use (``language`` defaults to
        ``python``), the same rule as the HTTP API, the CLI and MCP. ``timeout`` is the program's
        wall-clock limit in **milliseconds** (20 s is ``20000``; ``timeout_ms`` is its older name);
        below 100 the service refuses it with ``invalid_timeout``, as it is almost surely seconds.
        Not to be confused with the client's own HTTP ``timeout`` (seconds, given to the constructor).

        A program that fails, times out or hits a limit is still a result (see ``status``); a request
        the service refuses raises :class:`SandboxError`. ``TypeError`` without ``code``, or with
        ``timeout`` and ``timeout_ms`` that differ.
        """
        body = _build_body(profile, code, language, timeout, timeout_ms, files, outputs, stdin, env, harness, input)
        response = self._request("POST", "/v1/executions", json=body)
        return _parse_result(_json_body(response), response.status_code)

    def execute_stream(
        self,
        profile: Optional[str] = None,
        code: Optional[str] = None,
        *,
        language: Optional[str] = None,
        timeout: Optional[int] = None,
        timeout_ms: Optional[int] = None,
        files: Optional[Mapping[str, FileInput]] = None,
        outputs: Optional[Sequence[str]] = None,
        stdin: Optional[FileInput] = None,
        env: Optional[Mapping[str, str]] = None,
        harness: Optional[str] = None,
        input: Any = None,
    ) -> ExecutionStream:
        """Run ``code`` and stream its output: iterate for :class:`StreamChunk` items, then a
        :class:`StreamResult`. Use it in a ``with`` block (or call ``close()``) to release the
        connection early."""
        body = _build_body(profile, code, language, timeout, timeout_ms, files, outputs, stdin, env, harness, input)
        request = self._http.build_request(
            "POST", "/v1/executions", json=body, headers={"Accept": "text/event-stream"}
        )
        return ExecutionStream(self._http, request)

    def profiles(self) -> List[ProfileInfo]:
        """The profiles this caller may use."""
        return _parse_profiles(_json_body(self._request("GET", "/v1/profiles")))

    def profile(self, name: str) -> ProfileInfo:
        """One profile by name."""
        return _parse_profile(_json_body(self._request("GET", f"/v1/profiles/{quote(name, safe='')}")))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "SandboxClient":
        return self

    def __exit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# Asynchronous


class AsyncExecutionStream(AsyncIterator[StreamEvent]):
    """Async iterator over one streamed execution; see :class:`ExecutionStream`.

    Use ``async with client.execute_stream(...) as stream: async for event in stream: ...``, or
    iterate directly and call ``await stream.aclose()`` when stopping early.
    """

    def __init__(self, client: httpx.AsyncClient, request: httpx.Request) -> None:
        self._client = client
        self._request = request
        self._response: Optional[httpx.Response] = None
        self._chunks: Optional[AsyncIterator[bytes]] = None
        self._parser = _EventParser()
        self._pending: Deque[Union[StreamEvent, SandboxError]] = deque()
        self._finished = False
        self._closed = False

    @property
    def result(self) -> Optional[ExecutionResult]:
        return self._parser.result

    @property
    def response(self) -> Optional[httpx.Response]:
        return self._response

    async def open(self) -> "AsyncExecutionStream":
        """Send the request now (raises :class:`SandboxError` if the service refuses it)."""
        if self._response is not None or self._closed:
            return self
        try:
            response = await self._client.send(self._request, stream=True)
        except httpx.HTTPError as e:
            self._closed = True
            raise transport_error(e) from e
        self._response = response
        try:
            if response.status_code >= 400:
                raise error_from_response(response, await response.aread())
            if not _is_event_stream(response):
                await response.aread()
                result = _parse_result(_json_body(response), response.status_code)
                self._pending.append(StreamResult(result))
                self._parser.result = result
                self._finished = True
                await self._close_response()
                return self
            self._chunks = response.aiter_bytes()
        except httpx.HTTPError as e:
            await self.aclose()
            raise transport_error(e) from e
        except BaseException:
            await self.aclose()
            raise
        return self

    def __aiter__(self) -> "AsyncExecutionStream":
        return self

    async def __anext__(self) -> StreamEvent:
        if self._response is None and not self._closed:
            await self.open()
        while True:
            if self._pending:
                item = self._pending.popleft()
                if isinstance(item, SandboxError):
                    await self.aclose()
                    raise item
                return item
            if self._finished or self._closed or self._chunks is None:
                await self._close_response()
                raise StopAsyncIteration
            try:
                try:
                    data = await self._chunks.__anext__()
                except StopAsyncIteration:
                    items = self._parser.end()
                    if self._parser.result is None and not any(isinstance(i, SandboxError) for i in items):
                        items.append(_incomplete())
                    self._pending.extend(items)
                    self._finished = True
                    await self._close_response()
                    continue
                items = self._parser.feed(data)
                self._pending.extend(items)
                if self._parser.result is not None or any(isinstance(i, SandboxError) for i in items):
                    self._finished = True
                    await self._close_response()
            except httpx.HTTPError as e:
                await self.aclose()
                raise transport_error(e) from e
            except BaseException:
                await self.aclose()
                raise

    async def until_result(self) -> ExecutionResult:
        """Consume the rest of the stream and return the result."""
        async for _ in self:
            pass
        if self.result is None:  # pragma: no cover
            raise _incomplete()
        return self.result

    async def _close_response(self) -> None:
        if self._response is not None and not self._response.is_closed:
            await self._response.aclose()

    async def aclose(self) -> None:
        """Close the HTTP response; further iteration stops."""
        self._closed = True
        self._pending.clear()
        await self._close_response()

    async def __aenter__(self) -> "AsyncExecutionStream":
        return await self.open()

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.aclose()


class AsyncSandboxClient:
    """Asynchronous client of the Sandbox Service (``async with AsyncSandboxClient(...) as sb``)."""

    def __init__(
        self,
        base_url: str,
        api_key: Optional[str] = None,
        timeout: TimeoutTypes = DEFAULT_TIMEOUT,
        *,
        headers: Optional[Mapping[str, str]] = None,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=_headers(api_key, headers), timeout=_timeout(timeout), transport=transport
        )

    @property
    def http(self) -> httpx.AsyncClient:
        """The underlying ``httpx.AsyncClient``."""
        return self._http

    async def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = await self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise transport_error(e) from e
        if response.status_code >= 400:
            raise error_from_response(response, response.content)
        return response

    async def execute(
        self,
        profile: Optional[str] = None,
        code: Optional[str] = None,
        *,
        language: Optional[str] = None,
        timeout: Optional[int] = None,
        timeout_ms: Optional[int] = None,
        files: Optional[Mapping[str, FileInput]] = None,
        outputs: Optional[Sequence[str]] = None,
        stdin: Optional[FileInput] = None,
        env: Optional[Mapping[str, str]] = None,
        harness: Optional[str] = None,
        input: Any = None,
    ) -> ExecutionResult:
        """Run ``code`` under ``profile`` and wait for the result; see :meth:`SandboxClient.execute`."""
        body = _build_body(profile, code, language, timeout, timeout_ms, files, outputs, stdin, env, harness, input)
        response = await self._request("POST", "/v1/executions", json=body)
        return _parse_result(_json_body(response), response.status_code)

    def execute_stream(
        self,
        profile: Optional[str] = None,
        code: Optional[str] = None,
        *,
        language: Optional[str] = None,
        timeout: Optional[int] = None,
        timeout_ms: Optional[int] = None,
        files: Optional[Mapping[str, FileInput]] = None,
        outputs: Optional[Sequence[str]] = None,
        stdin: Optional[FileInput] = None,
        env: Optional[Mapping[str, str]] = None,
        harness: Optional[str] = None,
        input: Any = None,
    ) -> AsyncExecutionStream:
        """Run ``code`` and stream its output (``async for``); see :meth:`SandboxClient.execute_stream`.
        Not a coroutine: the request is sent on the first ``__anext__`` or on ``async with``."""
        body = _build_body(profile, code, language, timeout, timeout_ms, files, outputs, stdin, env, harness, input)
        request = self._http.build_request(
            "POST", "/v1/executions", json=body, headers={"Accept": "text/event-stream"}
        )
        return AsyncExecutionStream(self._http, request)

    async def profiles(self) -> List[ProfileInfo]:
        """The profiles this caller may use."""
        return _parse_profiles(_json_body(await self._request("GET", "/v1/profiles")))

    async def profile(self, name: str) -> ProfileInfo:
        """One profile by name."""
        return _parse_profile(_json_body(await self._request("GET", f"/v1/profiles/{quote(name, safe='')}")))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncSandboxClient":
        return self

    async def __aexit__(
        self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        await self.aclose()
