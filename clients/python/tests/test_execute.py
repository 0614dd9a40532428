"""Round trips through a real server with the synchronous client."""

from __future__ import annotations

import hashlib
import time

import pytest

from sandbox_client import ExecutionResult, SandboxClient, StreamChunk, StreamResult

from .conftest import Server


def test_python_round_trip(client: SandboxClient) -> None:
    r = client.execute(profile="python-default", code="import sys\nprint(6*7)\nprint('warn', file=sys.stderr)")
    assert isinstance(r, ExecutionResult)
    assert r.status == "ok" and r.ok
    assert r.stdout == "42\n"
    assert r.stderr == "warn\n"
    assert r.exit_code == 0
    assert r.language == "python"
    assert r.profile == "python-default"
    assert r.timed_out is False and r.oom_killed is False
    assert r.stdout_truncated is False and r.stderr_truncated is False
    assert r.duration_ms >= r.timing.run_ms >= 0
    assert r.resource_usage.peak_memory_bytes > 0
    assert r.execution_id
    assert r.files == {}
    assert r.raw["executionId"] == r.execution_id


def test_typescript_round_trip(client: SandboxClient) -> None:
    r = client.execute(
        profile="typescript-default",
        code="const x: number = 6 * 7;\ninterface P { n: number }\nconst p: P = { n: x };\nconsole.log(p.n);",
    )
    assert r.status == "ok", r
    assert r.stdout == "42\n"
    assert r.language == "typescript"


def test_explicit_language(client: SandboxClient) -> None:
    r = client.execute(profile="python-default", language="python", code="print('x')")
    assert r.stdout == "x\n"


def test_text_and_binary_input_files(client: SandboxClient) -> None:
    blob = bytes(range(256)) * 4
    code = (
        "import hashlib\n"
        "print(open('data/in.txt', encoding='utf-8').read())\n"
        "b = open('blob.bin', 'rb').read()\n"
        "print(len(b), hashlib.sha256(b).hexdigest())\n"
    )
    r = client.execute(profile="python-default", code=code, files={"data/in.txt": "héllo wörld", "blob.bin": blob})
    assert r.status == "ok", r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "héllo wörld"
    assert lines[1] == f"{len(blob)} {hashlib.sha256(blob).hexdigest()}"


def test_binary_output_file_is_byte_identical(client: SandboxClient) -> None:
    r = client.execute(
        profile="python-default",
        code="open('out.bin', 'wb').write(bytes(range(256)))\nopen('note.txt', 'w').write('hi')",
        outputs=["*.bin"],
    )
    assert r.status == "ok", r.stderr
    assert set(r.files) == {"out.bin"}
    f = r.files["out.bin"]
    assert f.data == bytes(range(256))
    assert f.size == 256
    assert f.sha256 == hashlib.sha256(bytes(range(256))).hexdigest()
    assert isinstance(f.mime_type, str) and f.mime_type


def test_output_files_default_all(client: SandboxClient) -> None:
    r = client.execute(profile="python-default", code="open('a.txt','w').write('A')\nopen('b.json','w').write('{}')")
    assert set(r.files) == {"a.txt", "b.json"}
    assert r.files["a.txt"].text == "A"
    assert r.files["b.json"].mime_type == "application/json"


def test_stdin_text_and_bytes(client: SandboxClient) -> None:
    r = client.execute(profile="python-default", code="import sys\nprint(sys.stdin.read().upper())", stdin="abc")
    assert r.stdout == "ABC\n"
    r = client.execute(
        profile="python-default", code="import sys\nprint(list(sys.stdin.buffer.read()))", stdin=b"\x00\xff\x10"
    )
    assert r.stdout == "[0, 255, 16]\n"


def test_env(client: SandboxClient) -> None:
    r = client.execute(profile="python-default", code="import os\nprint(os.environ['GREETING'])", env={"GREETING": "hey"})
    assert r.stdout == "hey\n"


def test_non_zero_exit_code(client: SandboxClient) -> None:
    r = client.execute(profile="python-default", code="import sys\nprint('bye')\nsys.exit(3)")
    assert r.status == "error"
    assert r.exit_code == 3
    assert r.stdout == "bye\n"
    assert not r.ok


def test_uncaught_exception(client: SandboxClient) -> None:
    r = client.execute(profile="python-default", code="raise ValueError('boom')")
    assert r.status == "error"
    assert r.exit_code == 1
    assert "ValueError: boom" in r.stderr


def test_timeout(client: SandboxClient) -> None:
    started = time.monotonic()
    r = client.execute(profile="python-default", code="while True: pass", timeout_ms=1000)
    assert r.status == "timeout"
    assert r.timed_out is True
    assert time.monotonic() - started < 20


def test_stdout_truncation(client: SandboxClient) -> None:
    r = client.execute(profile="python-default", code="import sys\nsys.stdout.write('x' * (2 * 1024 * 1024))")
    assert r.stdout_truncated is True
    assert r.status == "output_limit"
    assert 0 < len(r.stdout) <= 1024 * 1024


def test_non_utf8_stdout_is_exact_in_stdout_bytes(client: SandboxClient) -> None:
    r = client.execute(profile="python-default", code="import sys\nsys.stdout.buffer.write(b'ok\\xff\\xfe\\n')")
    assert r.status == "ok"
    assert r.stdout_base64 is not None
    assert r.stdout_bytes == b"ok\xff\xfe\n"
    assert "\ufffd" in r.stdout


def test_profiles(client: SandboxClient) -> None:
    names = {p.name for p in client.profiles()}
    assert {"python-default", "typescript-default"} <= names
    p = client.profile("python-default")
    assert p.name == "python-default"
    assert p.language == "python"
    assert p.timeout_max_ms >= p.timeout_ms > 0
    assert p.memory_max_bytes > 0 and p.cpu_max > 0
    assert p.stdout_max_bytes == 1024 * 1024
    assert p.network == "none"
    assert isinstance(p.mounts, list)


STREAM_CODE = "import time\nfor i in range(6):\n    print('line', i, flush=True)\n    time.sleep(0.2)\n"


def test_streaming_delivers_chunks_before_the_result(client: SandboxClient) -> None:
    started = time.monotonic()
    first_chunk_at = None
    result_at = None
    text = ""
    events = []
    with client.execute_stream(profile="python-default", code=STREAM_CODE) as stream:
        for ev in stream:
            events.append(ev)
            if isinstance(ev, StreamChunk):
                if first_chunk_at is None:
                    first_chunk_at = time.monotonic() - started
                assert ev.stream == "stdout"
                text += ev.text
            else:
                assert isinstance(ev, StreamResult)
                result_at = time.monotonic() - started
    assert first_chunk_at is not None and result_at is not None
    # Six lines 200 ms apart: the first must arrive long before the end.
    assert result_at - first_chunk_at > 0.6, (first_chunk_at, result_at)
    assert isinstance(events[-1], StreamResult)
    result = events[-1].result
    assert result.status == "ok"
    assert text == result.stdout == "".join(f"line {i}\n" for i in range(6))
    assert stream.result is result
    assert stream.response is not None and stream.response.is_closed


def test_streaming_stderr_and_until_result(client: SandboxClient) -> None:
    stream = client.execute_stream(
        profile="python-default", code="import sys\nsys.stderr.write('E\\n')\nsys.stderr.flush()\nprint('O')"
    )
    first = next(stream)
    assert isinstance(first, StreamChunk)
    result = stream.until_result()
    assert result.stdout == "O\n" and result.stderr == "E\n"


def test_closing_a_stream_closes_the_response_and_frees_the_slot(queue_server: Server) -> None:
    from .conftest import API_KEY

    with SandboxClient(queue_server.url, api_key=API_KEY, timeout=60) as c:
        stream = c.execute_stream(profile="python-default", code="import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.05)")
        ev = next(stream)
        assert isinstance(ev, StreamChunk)
        stream.close()
        assert stream.response is not None and stream.response.is_closed
        assert list(stream) == []
        # The server drops the execution when the client goes away: the only slot frees up.
        deadline = time.monotonic() + 15
        while True:
            try:
                r = c.execute(profile="python-default", code="print('after')")
                break
            except Exception as e:  # queue_full until the teardown finished
                if getattr(e, "code", None) != "queue_full" or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert r.stdout == "after\n"
