"""`sandbox_execute_code` and `sandbox_list_profiles` through the official MCP Python SDK, over
stdio (`sandbox mcp`) and streamable HTTP (`/mcp`), with the 2026-07-28 protocol (no handshake)
and the 2025-11-25 `initialize` handshake."""

from __future__ import annotations

import base64
import hashlib
import struct
import zlib

import anyio
import jsonschema
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from conftest import KEY_PY, Sandbox, connect

pytestmark = pytest.mark.anyio

EXECUTE = "sandbox_execute_code"

# A bar chart drawn pixel by pixel and written as a PNG with the standard library only.
CHART = r"""
import struct, zlib
values = [3, 7, 4, 9, 5]
w, h, bar = 100, 60, 20
rows = []
for y in range(h):
    row = bytearray()
    for x in range(w):
        v = values[x // bar]
        filled = (h - y) <= v * 6 and (x % bar) < bar - 4
        row += bytes((40, 90, 200) if filled else (255, 255, 255))
    rows.append(b"\x00" + bytes(row))
def chunk(kind, data):
    c = kind + data
    return struct.pack(">I", len(data)) + c + struct.pack(">I", zlib.crc32(c) & 0xFFFFFFFF)
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) \
    + chunk(b"IDAT", zlib.compress(b"".join(rows))) + chunk(b"IEND", b"")
open("chart.png", "wb").write(png)
print("chart written")
"""


def text_of(result) -> str:
    return result.content[0].text


async def tool_schemas(client: Client) -> dict:
    tools = await client.list_tools()
    return {t.name: t for t in tools.tools}


async def test_lists_tools_with_valid_schemas_and_the_callers_profiles(client: Client) -> None:
    tools = await tool_schemas(client)
    assert set(tools) == {"sandbox_execute_code", "sandbox_list_profiles"}
    execute = tools[EXECUTE]
    for schema in (execute.input_schema, execute.output_schema, tools["sandbox_list_profiles"].output_schema):
        jsonschema.Draft202012Validator.check_schema(schema)
    props = execute.input_schema["properties"]
    assert set(execute.input_schema["required"]) == {"code", "language"}
    assert {"code", "language", "harness", "profile", "timeout_ms", "files", "input"} <= set(props)
    assert all(p.get("description") for p in props.values()), props
    # The profiles and their limits are in the descriptions the model reads.
    for text in (execute.description, props["profile"]["description"]):
        assert "python-default" in text and "typescript-default" in text and "py-quick" in text
        assert "300000 ms" in text and "network none" in text
    assert "isError is false only when" in execute.description
    listed = await client.call_tool("sandbox_list_profiles", {})
    assert listed.is_error is False
    names = [p["name"] for p in listed.structured_content["profiles"]]
    assert {"python-default", "typescript-default", "py-quick"} <= set(names)
    quick = next(p for p in listed.structured_content["profiles"] if p["name"] == "py-quick")
    assert (quick["language"], quick["timeoutMs"], quick["timeoutMaxMs"], quick["network"]) == ("python", 2000, 5000, "none")
    jsonschema.validate(listed.structured_content, tools["sandbox_list_profiles"].output_schema)


async def test_runs_python_and_typescript(client: Client) -> None:
    schema = (await tool_schemas(client))[EXECUTE].output_schema
    r = await client.call_tool(EXECUTE, {"code": "print(6*7)", "language": "python"})
    assert r.is_error is False, text_of(r)
    s = r.structured_content
    assert (s["status"], s["exitCode"], s["stdout"], s["profile"]) == ("ok", 0, "42\n", "python-default")
    jsonschema.validate(s, schema)
    assert "status: ok" in text_of(r) and "42" in text_of(r)
    ts = "const xs: number[] = [1, 2, 3];\nconsole.log(xs.map((x: number) => x * 2).join(','));"
    r = await client.call_tool(EXECUTE, {"code": ts, "language": "typescript"})
    assert r.is_error is False, text_of(r)
    assert (r.structured_content["stdout"], r.structured_content["profile"], r.structured_content["language"]) == ("2,4,6\n", "typescript-default", "typescript")
    jsonschema.validate(r.structured_content, schema)


async def test_input_files_text_and_base64(client: Client) -> None:
    code = "import csv\nrows = list(csv.DictReader(open('data.csv')))\nprint(sum(int(r['b']) for r in rows), open('raw.bin','rb').read().hex())"
    files = {"data.csv": "a,b\n1,2\n3,4\n", "raw.bin": {"base64": base64.b64encode(b"\x00\xff").decode()}}
    r = await client.call_tool(EXECUTE, {"code": code, "language": "python", "files": files, "timeout_ms": 20000})
    assert r.is_error is False, text_of(r)
    assert r.structured_content["stdout"] == "6 00ff\n"


async def test_input_files_past_the_sdk_default_body_limit(client: Client) -> None:
    # 6 MB of input: over rmcp's 4 MiB default request limit, within `[service] body_max_bytes`.
    files = {"big.txt": "a" * 6_000_000}
    r = await client.call_tool(EXECUTE, {"code": "print(len(open('big.txt').read()))", "language": "python", "files": files})
    assert r.is_error is False, text_of(r)
    assert r.structured_content["stdout"] == "6000000\n"


async def test_png_chart_arrives_as_image_content(client: Client) -> None:
    r = await client.call_tool(EXECUTE, {"code": CHART, "language": "python"})
    assert r.is_error is False, text_of(r)
    images = [c for c in r.content if c.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    png = base64.b64decode(images[0].data)
    # A valid PNG: signature, IHDR of the drawn size, every chunk's CRC, pixels that inflate.
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", png[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + data) & 0xFFFFFFFF, kind
        chunks[kind] = data
        pos += 12 + length
    assert struct.unpack(">II", chunks[b"IHDR"][:8]) == (100, 60)
    assert len(zlib.decompress(chunks[b"IDAT"])) == 60 * (1 + 100 * 3)
    f = r.structured_content["files"]["chart.png"]
    assert (f["mimeType"], f["size"], f["sha256"], f["inline"]) == ("image/png", len(png), hashlib.sha256(png).hexdigest(), True)
    assert f["uri"] == f"sandbox://executions/{r.structured_content['executionId']}/files/chart.png"


async def test_function_harness_returns_data(client: Client) -> None:
    code = "print('log line')\ndef main(input):\n    return {'doubled': [x * 2 for x in input['xs']]}\n"
    r = await client.call_tool(EXECUTE, {"code": code, "language": "python", "harness": "function", "input": {"xs": [1, 2.5]}})
    assert r.is_error is False, text_of(r)
    assert r.structured_content["returnData"] == {"doubled": [2, 5.0]}
    assert r.structured_content["stdout"] == "log line\n"
    assert "doubled" in text_of(r)
    ts = "export default async function main(input: { n: number }) {\n  return { squared: input.n ** 2 };\n}\n"
    r = await client.call_tool(EXECUTE, {"code": ts, "language": "typescript", "harness": "function", "input": {"n": 7}})
    assert r.is_error is False, text_of(r)
    assert r.structured_content["returnData"] == {"squared": 49}


async def test_matplotlib_chart_in_the_analysis_environment(client: Client) -> None:
    code = (
        "import matplotlib.pyplot as plt\nimport numpy as np\n"
        "fig, ax = plt.subplots(figsize=(4, 3), dpi=100)\nax.bar(['a', 'b'], np.array([3, 5]))\nfig.savefig('bars.png')\n"
    )
    r = await client.call_tool(EXECUTE, {"code": code, "language": "python", "profile": "python-analysis"})
    assert r.is_error is False, text_of(r)
    images = [c for c in r.content if c.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    png = base64.b64decode(images[0].data)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (400, 300)


async def test_exception_comes_back_structured_with_the_callers_line(client: Client) -> None:
    r = await client.call_tool(EXECUTE, {"code": "x = 1\n\ndef f():\n    return {}['k']\nf()\n", "language": "python"})
    assert r.is_error is True
    e = r.structured_content["error"]
    assert (e["type"], e["line"]) == ("KeyError", 4), e
    r = await client.call_tool(EXECUTE, {"code": "const a: number = 1;\nthrow new TypeError(`bad ${a}`);\n", "language": "typescript"})
    e = r.structured_content["error"]
    assert (r.is_error, e["type"], e["message"], e["line"]) == (True, "TypeError", "bad 1", 2), e


async def test_program_exception_is_a_tool_error(client: Client) -> None:
    r = await client.call_tool(EXECUTE, {"code": "def f():\n    raise ValueError('bad input')\nf()", "language": "python"})
    assert r.is_error is True
    s = r.structured_content
    assert (s["status"], s["exitCode"]) == ("error", 1)
    assert "ValueError: bad input" in s["stderr"]
    assert "the program ran and failed with exit code 1" in text_of(r) and "ValueError: bad input" in text_of(r)


@pytest.mark.parametrize(
    "args,code,field",
    [
        ({"code": "print(1)", "language": "python", "profile": "no-such-profile"}, "profile_not_found", "profile"),
        ({"code": "print(1)", "language": "python", "files": {"../etc/passwd": "x"}}, "invalid_file_name", 'files["../etc/passwd"]'),
        ({"code": "print(1)", "language": "python", "profile": "py-quick", "timeout_ms": 600000}, "timeout_too_large", "timeout_ms"),
        ({"code": "print(1)", "language": "typescript", "profile": "python-default"}, "unsupported_language", None),
        ({"language": "python"}, "invalid_request", None),
        ({"code": "print(1)", "language": "cobol"}, "invalid_request", None),
    ],
    ids=["unknown-profile", "bad-file-name", "timeout-above-max", "language-mismatch", "missing-code", "unknown-language"],
)
async def test_requests_the_sandbox_cannot_run_are_rejected_tool_errors(client: Client, args: dict, code: str, field: str | None) -> None:
    r = await client.call_tool(EXECUTE, args)
    assert r.is_error is True
    s = r.structured_content
    assert s["status"] == "rejected" and s["error"]["type"] == code, s
    if field is not None:
        assert s["error"].get("field") == field, s
    assert "exitCode" not in s
    assert f"status: rejected ({code})" in text_of(r) and "did not run" in text_of(r)


async def test_unknown_profile_names_the_callers_profiles(client: Client) -> None:
    r = await client.call_tool(EXECUTE, {"code": "print(1)", "language": "python", "profile": "gpu-large"})
    assert r.is_error is True
    assert "python-default" in r.structured_content["error"]["message"]


async def test_timeout_is_a_tool_error(client: Client) -> None:
    r = await client.call_tool(EXECUTE, {"code": "import time\nprint('start', flush=True)\ntime.sleep(60)", "language": "python", "profile": "py-quick", "timeout_ms": 1000})
    assert r.is_error is True
    s = r.structured_content
    assert (s["status"], s["timedOut"], s["stdout"]) == ("timeout", True, "start\n")
    assert "status: timeout" in text_of(r)


async def test_unknown_tool_is_a_protocol_error(client: Client) -> None:
    with pytest.raises(MCPError) as e:
        await client.call_tool("sandbox_delete_everything", {})
    assert e.value.error.code == -32602


async def test_progress_notifications_while_it_runs(client: Client) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def progress(p: float, total: float | None, message: str | None) -> None:
        seen.append((p, total, message))

    code = "import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.6)"
    r = await client.call_tool(EXECUTE, {"code": code, "language": "python", "timeout_ms": 20000}, progress_callback=progress)
    assert r.is_error is False, text_of(r)
    assert seen, "no progress notification"
    assert all(total == 20000 for _, total, _ in seen) and all("timeout" in (m or "") for _, _, m in seen)
    assert [p for p, _, _ in seen] == sorted(p for p, _, _ in seen)


@pytest.mark.parametrize("transport,mode", [("stdio", "auto"), ("stdio", "legacy"), ("http", "auto"), ("http", "legacy")])
async def test_cancellation_ends_the_execution_and_leaves_nothing(sandbox: Sandbox, transport: str, mode: str) -> None:
    started = anyio.Event()

    async def progress(p: float, total: float | None, message: str | None) -> None:
        # The program printed its line: it is running inside its sandbox.
        if message and not message.endswith(" 0 bytes of output so far"):
            started.set()

    marker = f"cancel-me-{transport}-{mode}"
    code = f"import time\nprint('{marker}', flush=True)\ntime.sleep(120)"
    async with connect(sandbox, transport, mode) as client:
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                await client.call_tool(EXECUTE, {"code": code, "language": "python", "timeout_ms": 200000}, progress_callback=progress)

            tg.start_soon(call)
            with anyio.fail_after(60):
                await started.wait()
            assert sandbox.executions_left(), "the execution is running"
            # Cancelling the call's scope sends notifications/cancelled (over 2026-07-28 HTTP: closes the request's stream).
            tg.cancel_scope.cancel()
        # The client is still connected; the server ended that execution only.
        with anyio.fail_after(30):
            while sandbox.executions_left():
                await anyio.sleep(0.1)
        r = await client.call_tool(EXECUTE, {"code": "print('still here')", "language": "python"})
        assert r.structured_content["stdout"] == "still here\n"
    records = [rec for rec in sandbox.audit() if marker in ((rec.get("request") or {}).get("code") or {}).get("text", "")]
    assert len(records) == 1 and records[0]["caller"].startswith("mcp:"), records


async def test_audit_names_the_key_and_the_mcp_client(sandbox: Sandbox) -> None:
    for transport, want in (("http", "mcp:key:all/sandbox-mcp-tests@1.0"), ("stdio", "mcp:cli:mcp-tester/sandbox-mcp-tests@1.0")):
        marker = f"audit-{transport}"
        async with connect(sandbox, transport, "auto") as client:
            r = await client.call_tool(EXECUTE, {"code": f"print('{marker}')", "language": "python"})
        exec_id = r.structured_content["executionId"]
        record = next(rec for rec in sandbox.audit() if rec["executionId"] == exec_id)
        assert (record["caller"], record["status"]) == (want, "ok")


async def test_results_stay_under_the_size_budget_and_the_rest_is_a_resource(client: Client) -> None:
    # 600 KB of stdout and 600 KB of random bytes: over what one result may carry.
    code = "import os\nopen('blob.bin','wb').write(os.urandom(600_000))\nimport sys\nsys.stdout.write('x' * 600_000)"
    r = await client.call_tool(EXECUTE, {"code": code, "language": "python", "timeout_ms": 30000})
    assert r.is_error is False, text_of(r)
    s = r.structured_content
    assert len(s["stdout"]) < 600_000 and s["stdoutOmittedBytes"] == 600_000 - len(s["stdout"])
    blob = s["files"]["blob.bin"]
    assert blob["inline"] is False and blob["size"] == 600_000
    assert "not attached" in text_of(r) and blob["sha256"] in text_of(r)
    links = [c for c in r.content if c.type == "resource_link"]
    assert [(str(link.uri), link.size, link.mime_type) for link in links] == [(blob["uri"], 600_000, "application/octet-stream")]
    read = await client.read_resource(blob["uri"])
    data = base64.b64decode(read.contents[0].blob)
    assert hashlib.sha256(data).hexdigest() == blob["sha256"]
    whole = await client.read_resource(f"sandbox://executions/{s['executionId']}/stdout")
    assert whole.contents[0].text == "x" * 600_000


async def test_http_needs_a_key_and_checks_host_and_origin(sandbox: Sandbox) -> None:
    import httpx2

    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

    async def post(extra: dict) -> httpx2.Response:
        # A fresh connection each: the server closes one whose request it refused unread.
        async with httpx2.AsyncClient() as http:
            return await http.post(f"{sandbox.url}/mcp", json=body, headers={**headers, **extra})

    r = await post({})
    assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), r.text
    assert r.json()["code"] == "unauthorized"
    r = await post({"authorization": "Bearer wrong"})
    assert r.status_code == 401
    auth = {"authorization": "Bearer mcp-test-key-all"}
    # The service's Host/Origin policy, the same on every route (DNS rebinding, cross-origin pages).
    r = await post({**auth, "host": "evil.example"})
    assert r.status_code == 421 and r.json()["code"] == "host_not_allowed", r.text
    r = await post({**auth, "origin": "http://evil.example"})
    assert r.status_code == 403 and r.json()["code"] == "origin_not_allowed", r.text
    r = await post(auth)
    assert r.status_code == 200 and "\"protocolVersion\":\"2025-11-25\"" in r.text and r.headers["mcp-session-id"], r.text


async def test_a_key_sees_and_uses_only_its_profiles(sandbox: Sandbox) -> None:
    async with connect(sandbox, "http", "auto", key=KEY_PY) as client:
        execute = (await tool_schemas(client))[EXECUTE]
        assert "python-default" in execute.description and "typescript-default" not in execute.description
        r = await client.call_tool(EXECUTE, {"code": "console.log(1)", "language": "typescript"})
        assert r.is_error is True and r.structured_content["error"]["type"] == "profile_not_found"
        r = await client.call_tool(EXECUTE, {"code": "console.log(1)", "language": "typescript", "profile": "typescript-default"})
        assert r.is_error is True and r.structured_content["error"]["type"] == "forbidden_profile"
        r = await client.call_tool(EXECUTE, {"code": "print(1)", "language": "python"})
        assert r.is_error is False


async def test_a_result_at_every_cap_still_fits_one_event(client: Client) -> None:
    # 1 MiB of stdout (the profile's cap, with escapes that JSON inflates), 1 MiB of stderr and a
    # 700 KB image: the result must stay under the 1 MiB a streamed event may have.
    code = (
        "import os, sys\n"
        "open('big.png','wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + os.urandom(700_000))\n"
        "sys.stdout.write('\\x01\"' * (1 << 19))\n"
        "sys.stderr.write('e' * (1 << 20))\n"
    )
    r = await client.call_tool(EXECUTE, {"code": code, "language": "python", "timeout_ms": 30000})
    s = r.structured_content
    assert s["status"] == "ok" and s["stdoutOmittedBytes"] > 0 and s["stderrOmittedBytes"] > 0, text_of(r)
    assert s["files"]["big.png"]["inline"] is False
    assert len(r.model_dump_json(by_alias=True)) < 900 * 1024


async def test_closing_an_http_session_ends_it_as_the_sdk_expects(sandbox: Sandbox, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 17, item 8: the SDK's DELETE on close is answered 200, not 202 (which it logs as
    "Session termination failed: 202")."""
    import logging

    import httpx2

    caplog.set_level(logging.DEBUG)
    async with connect(sandbox, "http", "legacy") as client:
        await client.list_tools()
    failed = [r.getMessage() for r in caplog.records if "termination" in r.getMessage().lower()]
    assert not failed, failed

    auth = {"authorization": "Bearer mcp-test-key-all", "accept": "application/json, text/event-stream"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}
    async with httpx2.AsyncClient() as http:
        r = await http.post(f"{sandbox.url}/mcp", json=body, headers=auth)
        session = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
        r = await http.delete(f"{sandbox.url}/mcp", headers={**auth, **session})
        assert r.status_code == 200, (r.status_code, r.text)
