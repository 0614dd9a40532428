"""The one exception type of the client."""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any, Mapping, Optional

import httpx


class SandboxError(Exception):
    """A request the service refused or failed, or a failure to reach it.

    ``code`` is the service's stable error code (``invalid_file_name``, ``queue_full``, ...). The client
    adds its own codes for failures that never got a problem response:
    ``connection_error`` (could not connect, or the connection broke), ``client_timeout`` (the HTTP
    timeout of this client expired), ``unexpected_response`` (a response that is not the API's, e.g.
    from a proxy) and ``protocol_error`` (a malformed response or event stream).
    """

    code: str
    status: Optional[int]
    detail: str
    title: Optional[str]
    field: Optional[str]
    execution_id: Optional[str]
    retry_after: Optional[float]
    problem: Optional[Mapping[str, Any]]

    def __init__(
        self,
        code: str,
        detail: str,
        *,
        status: Optional[int] = None,
        title: Optional[str] = None,
        field: Optional[str] = None,
        execution_id: Optional[str] = None,
        retry_after: Optional[float] = None,
        problem: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.code = code
        self.status = status
        self.detail = detail
        self.title = title
        self.field = field
        self.execution_id = execution_id
        self.retry_after = retry_after
        self.problem = problem
        super().__init__(self._message())

    def _message(self) -> str:
        parts = [self.code]
        if self.status is not None:
            parts.append(f"(HTTP {self.status})")
        msg = " ".join(parts) + f": {self.detail}"
        if self.field:
            msg += f" [field {self.field}]"
        return msg

    def __repr__(self) -> str:
        return (
            f"SandboxError(code={self.code!r}, status={self.status!r}, detail={self.detail!r}, "
            f"field={self.field!r}, execution_id={self.execution_id!r}, retry_after={self.retry_after!r})"
        )

    @classmethod
    def from_problem(
        cls, problem: Mapping[str, Any], *, status: Optional[int] = None, retry_after: Optional[float] = None
    ) -> "SandboxError":
        """From an ``application/problem+json`` object."""
        st = problem.get("status")
        return cls(
            code=str(problem.get("code") or "unexpected_response"),
            detail=str(problem.get("detail") or problem.get("title") or ""),
            status=status if status is not None else (st if isinstance(st, int) else None),
            title=problem.get("title"),
            field=problem.get("field"),
            execution_id=problem.get("executionId"),
            retry_after=retry_after,
            problem=dict(problem),
        )


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """``Retry-After`` as seconds: delay-seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(int(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - time.time())


def error_from_response(response: httpx.Response, body: bytes) -> SandboxError:
    """The error for a non-2xx response whose body has been read."""
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    ctype = response.headers.get("content-type", "")
    data: Any = None
    if "json" in ctype:
        try:
            data = json.loads(body)
        except ValueError:
            data = None
    if isinstance(data, dict) and "code" in data:
        return SandboxError.from_problem(data, status=response.status_code, retry_after=retry_after)
    text = body.decode("utf-8", "replace").strip()
    if len(text) > 500:
        text = text[:500] + "..."
    return SandboxError(
        "unexpected_response",
        f"HTTP {response.status_code} {response.reason_phrase}: {text}" if text else f"HTTP {response.status_code}",
        status=response.status_code,
        retry_after=retry_after,
    )


def transport_error(exc: httpx.HTTPError) -> SandboxError:
    if isinstance(exc, httpx.TimeoutException):
        return SandboxError("client_timeout", f"the HTTP request timed out: {exc!r}")
    return SandboxError("connection_error", f"{type(exc).__name__}: {exc}")
