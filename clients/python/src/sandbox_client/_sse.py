"""A Server-Sent Events parser (WHATWG HTML "event stream interpretation"), fed line by line."""

from __future__ import annotations

from dataclasses import dataclass
import re
from typing import List, Optional, Tuple

_EOL = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class ServerSentEvent:
    event: str
    data: str
    id: Optional[str] = None
    retry: Optional[int] = None


class SSEDecoder:
    """Feed it lines (without their terminators); it returns an event at each blank line that ends one."""

    def __init__(self) -> None:
        self._event = ""
        self._data: List[str] = []
        self._last_id: Optional[str] = None
        self._retry: Optional[int] = None
        self._first = True

    def decode(self, line: str) -> Optional[ServerSentEvent]:
        if self._first:
            self._first = False
            if line.startswith("\ufeff"):
                line = line[1:]
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # comment (keep-alive)
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry":
            if value.isdigit():
                self._retry = int(value)
        return None

    def _dispatch(self) -> Optional[ServerSentEvent]:
        if not self._data and not self._event:
            return None
        if not self._data:  # an event with no data is not dispatched
            self._event = ""
            return None
        ev = ServerSentEvent(event=self._event or "message", data="\n".join(self._data), id=self._last_id, retry=self._retry)
        self._event = ""
        self._data = []
        return ev

    def flush(self) -> Optional[ServerSentEvent]:
        """At end of stream: an unterminated event is discarded, as the spec says."""
        self._event = ""
        self._data = []
        return None


def split_lines(buffer: str) -> Tuple[List[str], str]:
    """Split on CRLF, LF or CR (only those: not on the other characters ``str.splitlines`` knows);
    returns the complete lines and the unterminated rest.

    A trailing CR stays in the rest, since an LF may follow in the next chunk.
    """
    if "\r" not in buffer:
        parts = buffer.split("\n")
        return parts[:-1], parts[-1]
    lines: List[str] = []
    start = 0
    n = len(buffer)
    while True:
        m = _EOL.search(buffer, start)
        if m is None:
            return lines, buffer[start:]
        if m.group() == "\r" and m.end() == n:
            return lines, buffer[start:]  # may be the first half of CRLF
        lines.append(buffer[start : m.start()])
        start = m.end()
