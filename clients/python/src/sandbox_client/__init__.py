"""Python client of the Sandbox Service: run untrusted Python and TypeScript in isolated containers.

>>> from sandbox_client import SandboxClient
>>> with SandboxClient("http://127.0.0.1:8080", api_key="...") as sb:
...     r = sb.execute(profile="python-default", code="print(6*7)")
...     print(r.status, r.stdout)
"""

from ._client import (
    DEFAULT_TIMEOUT,
    AsyncExecutionStream,
    AsyncSandboxClient,
    ExecutionStream,
    SandboxClient,
    __version__,
)
from ._errors import SandboxError
from ._models import (
    Enforcement,
    ExecError,
    ExecutionResult,
    FileInput,
    MountInfo,
    OutputFile,
    ProfileInfo,
    ResourceUsage,
    SkippedFile,
    Status,
    StreamChunk,
    StreamEvent,
    StreamName,
    StreamResult,
    Timing,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "AsyncExecutionStream",
    "AsyncSandboxClient",
    "Enforcement",
    "ExecError",
    "ExecutionResult",
    "ExecutionStream",
    "FileInput",
    "MountInfo",
    "OutputFile",
    "ProfileInfo",
    "ResourceUsage",
    "SandboxClient",
    "SandboxError",
    "SkippedFile",
    "Status",
    "StreamChunk",
    "StreamEvent",
    "StreamName",
    "StreamResult",
    "Timing",
    "__version__",
]
