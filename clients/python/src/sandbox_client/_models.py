"""Typed views of the service's JSON objects (camelCase on the wire, snake_case here)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Mapping, Optional, Union

Status = Literal["ok", "error", "timeout", "memory_limit", "output_limit", "rejected", "internal_error"]
"""How an execution ended."""

StreamName = Literal["stdout", "stderr"]

FileInput = Union[str, bytes, bytearray, memoryview]
"""Content of an input file or of stdin: text (sent as UTF-8) or bytes (sent as base64)."""


def _opt_int(v: Any) -> Optional[int]:
    return None if v is None else int(v)


def _b64decode(s: str) -> bytes:
    return base64.b64decode(s, validate=True)


@dataclass(frozen=True)
class OutputFile:
    """One file the program wrote, returned by the service."""

    data: bytes
    """The file's bytes (decoded from base64)."""
    size: int
    sha256: str
    """Lowercase hex SHA-256 of the bytes, as computed by the server."""
    mime_type: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "OutputFile":
        return cls(data=_b64decode(d["base64"]), size=int(d["size"]), sha256=d["sha256"], mime_type=d["mimeType"])

    @property
    def text(self) -> str:
        """The bytes decoded as UTF-8 (raises ``UnicodeDecodeError`` if they are not)."""
        return self.data.decode("utf-8")


@dataclass(frozen=True)
class SkippedFile:
    """A workspace entry that was not returned, and why.

    ``reason`` is ``symlink``, ``not_regular_file``, ``non_utf8_name``, ``name_too_long``,
    ``too_deep``, ``count_cap``, ``bytes_cap``, ``entry_cap``, ``unreadable``,
    ``changed_while_reading``, or ``list_cap``: the last entry of a list past 1,000, standing for
    the rest, whose number is ``count``. ``size`` is in bytes, where known.
    """

    name: str
    reason: str
    size: Optional[int] = None
    count: Optional[int] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "SkippedFile":
        return cls(name=d["name"], reason=d["reason"], size=_opt_int(d.get("size")), count=_opt_int(d.get("count")))


@dataclass(frozen=True)
class ResourceUsage:
    cpu_time_ms: int
    peak_memory_bytes: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ResourceUsage":
        return cls(cpu_time_ms=int(d["cpuTimeMs"]), peak_memory_bytes=int(d["peakMemoryBytes"]))


@dataclass(frozen=True)
class Timing:
    queue_ms: int
    setup_ms: int
    run_ms: int
    collect_ms: int
    #: Started warm (forked from a template, or in a pooled sandbox) rather than cold.
    warm: bool = False
    #: How a warm run started, ``"template"`` or ``"pool"``; ``None`` when cold.
    warm_start: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Timing":
        return cls(
            queue_ms=int(d["queueMs"]),
            setup_ms=int(d["setupMs"]),
            run_ms=int(d["runMs"]),
            collect_ms=int(d["collectMs"]),
            warm=bool(d.get("warmStart") is not None or d.get("warm", False)),
            warm_start=d.get("warmStart"),
        )


@dataclass(frozen=True)
class Enforcement:
    """Isolation actually enforced for an execution."""

    cgroup: str
    landlock_abi: int
    seccomp: bool
    network: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Enforcement":
        return cls(cgroup=d["cgroup"], landlock_abi=int(d["landlockAbi"]), seccomp=bool(d["seccomp"]), network=d["network"])


@dataclass(frozen=True)
class ExecError:
    """A structured error inside a result: a rejection, a service failure, or the program's error."""

    type: str
    message: str
    field: Optional[str] = None
    line: Optional[int] = None
    column: Optional[int] = None
    traceback: Optional[str] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExecError":
        return cls(
            type=d["type"],
            message=d["message"],
            field=d.get("field"),
            line=_opt_int(d.get("line")),
            column=_opt_int(d.get("column")),
            traceback=d.get("traceback"),
        )


@dataclass(frozen=True)
class ExecutionResult:
    """The result of one execution."""

    execution_id: str
    status: Status
    profile: str
    language: Optional[str]
    stdout: str
    """Captured stdout, lossy UTF-8; see :attr:`stdout_bytes` for the exact bytes."""
    stderr: str
    exit_code: Optional[int]
    signal: Optional[int]
    signal_name: Optional[str]
    duration_ms: int
    timed_out: bool
    oom_killed: bool
    stdout_truncated: bool
    stderr_truncated: bool
    files: Dict[str, OutputFile]
    skipped_files: List[SkippedFile]
    killed_at_teardown: int
    resource_usage: ResourceUsage
    timing: Timing
    stdout_base64: Optional[str] = None
    stderr_base64: Optional[str] = None
    return_data: Any = None
    enforcement: Optional[Enforcement] = None
    error: Optional[ExecError] = None
    network: Optional[Dict[str, Any]] = None
    """Allowlist profiles: ``{"allowed": [...], "blocked": [...], "allowedOmitted", "blockedOmitted", "bufferPeakBytes"}`` (camelCase, as sent)."""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The JSON object as received."""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ExecutionResult":
        enforcement = d.get("enforcement")
        error = d.get("error")
        return cls(
            execution_id=d["executionId"],
            status=d["status"],
            profile=d["profile"],
            language=d.get("language"),
            stdout=d["stdout"],
            stderr=d["stderr"],
            exit_code=_opt_int(d.get("exitCode")),
            signal=_opt_int(d.get("signal")),
            signal_name=d.get("signalName"),
            duration_ms=int(d["durationMs"]),
            timed_out=bool(d["timedOut"]),
            oom_killed=bool(d["oomKilled"]),
            stdout_truncated=bool(d["stdoutTruncated"]),
            stderr_truncated=bool(d["stderrTruncated"]),
            files={name: OutputFile.from_json(f) for name, f in (d.get("files") or {}).items()},
            skipped_files=[SkippedFile.from_json(s) for s in (d.get("skippedFiles") or [])],
            killed_at_teardown=int(d.get("killedAtTeardown") or 0),
            resource_usage=ResourceUsage.from_json(d["resourceUsage"]),
            timing=Timing.from_json(d["timing"]),
            stdout_base64=d.get("stdoutBase64"),
            stderr_base64=d.get("stderrBase64"),
            return_data=d.get("returnData"),
            enforcement=None if enforcement is None else Enforcement.from_json(enforcement),
            error=None if error is None else ExecError.from_json(error),
            network=d.get("network"),
            raw=dict(d),
        )

    @property
    def ok(self) -> bool:
        """``status == "ok"`` (the program ran and exited 0)."""
        return self.status == "ok"

    @property
    def stdout_bytes(self) -> bytes:
        """The exact stdout bytes (from ``stdoutBase64`` when stdout was not valid UTF-8)."""
        if self.stdout_base64 is not None:
            return _b64decode(self.stdout_base64)
        return self.stdout.encode("utf-8")

    @property
    def stderr_bytes(self) -> bytes:
        """The exact stderr bytes (from ``stderrBase64`` when stderr was not valid UTF-8)."""
        if self.stderr_base64 is not None:
            return _b64decode(self.stderr_base64)
        return self.stderr.encode("utf-8")


@dataclass(frozen=True)
class MountInfo:
    path: str
    read_only: bool

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "MountInfo":
        return cls(path=d["path"], read_only=bool(d["readOnly"]))


@dataclass(frozen=True)
class ProfileInfo:
    """What a caller may know of a profile."""

    name: str
    language: str
    description: str
    harness: str
    harnesses: List[str]
    memory_max_bytes: int
    cpu_max: float
    pids_max: int
    timeout_ms: int
    timeout_max_ms: int
    workspace_max_bytes: int
    tmp_max_bytes: int
    stdout_max_bytes: int
    stderr_max_bytes: int
    files_max_count: int
    files_max_bytes: int
    network: str
    mounts: List[MountInfo]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ProfileInfo":
        return cls(
            name=d["name"],
            language=d["language"],
            description=d["description"],
            harness=d["harness"],
            harnesses=list(d["harnesses"]),
            memory_max_bytes=int(d["memoryMaxBytes"]),
            cpu_max=float(d["cpuMax"]),
            pids_max=int(d["pidsMax"]),
            timeout_ms=int(d["timeoutMs"]),
            timeout_max_ms=int(d["timeoutMaxMs"]),
            workspace_max_bytes=int(d["workspaceMaxBytes"]),
            tmp_max_bytes=int(d["tmpMaxBytes"]),
            stdout_max_bytes=int(d["stdoutMaxBytes"]),
            stderr_max_bytes=int(d["stderrMaxBytes"]),
            files_max_count=int(d["filesMaxCount"]),
            files_max_bytes=int(d["filesMaxBytes"]),
            network=d["network"],
            mounts=[MountInfo.from_json(m) for m in d["mounts"]],
            raw=dict(d),
        )


@dataclass(frozen=True)
class StreamChunk:
    """Output the program wrote while it ran."""

    stream: StreamName
    text: str


@dataclass(frozen=True)
class StreamResult:
    """The last item of a stream: the full result (whose stdout/stderr repeat the chunks)."""

    result: ExecutionResult


StreamEvent = Union[StreamChunk, StreamResult]
