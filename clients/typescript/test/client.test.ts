/** Round trips and error codes against a real `sandbox serve` with API keys. */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';

import { SandboxClient, SandboxError, type ExecutionResult, type StreamEvent } from '@sandbox-service/client';
import { startServer, type RunningServer } from './server.js';

const KEY = 'test-key-all-profiles';
const PY_ONLY_KEY = 'test-key-python-only';

let server: RunningServer;
let sandbox: SandboxClient;

before(async () => {
  server = await startServer({
    keys: [
      { name: 'all', key: KEY, profiles: ['*'] },
      { name: 'py', key: PY_ONLY_KEY, profiles: ['python-default'] },
    ],
  });
  sandbox = new SandboxClient({ baseUrl: server.url, apiKey: KEY });
});

after(async () => {
  await server?.stop();
});

/** Asserts `p` rejects with a SandboxError of `code`, and returns it. */
async function rejectsWith(p: Promise<unknown>, code: string, status: number): Promise<SandboxError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof SandboxError, `expected a SandboxError, got ${String(e)}`);
    assert.equal(e.code, code, e.message);
    assert.equal(e.status, status);
    assert.equal(e.name, 'SandboxError');
    assert.ok(e instanceof Error);
    return e;
  }
  assert.fail(`expected ${code}, but the call succeeded`);
}

function explain(r: ExecutionResult): string {
  return `status=${r.status} exit=${r.exitCode} stderr=${r.stderr.slice(0, 2000)} error=${JSON.stringify(r.error)}`;
}

describe('round trips', () => {
  test('Python: stdout, exit code, timing, text input file', async () => {
    const csv = 'name,value\na,1\nb,2\nc,39\n';
    const code = [
      'import csv',
      "rows = list(csv.DictReader(open('data.csv')))",
      "print(sum(int(r['value']) for r in rows))",
    ].join('\n');
    const result = await sandbox.execute({
      profile: 'python-default',
      language: 'python',
      code,
      timeout: 60000,
      files: { 'data.csv': csv },
    });
    assert.equal(result.status, 'ok', explain(result));
    assert.equal(result.stdout, '42\n');
    assert.equal(result.exitCode, 0);
    assert.equal(result.language, 'python');
    assert.equal(result.profile, 'python-default');
    assert.equal(typeof result.durationMs, 'number');
    assert.ok(result.durationMs >= 0);
    assert.match(result.executionId, /^[0-9a-f-]{36}$/);
    assert.equal(result.timedOut, false);
    assert.equal(typeof result.resourceUsage.peakMemoryBytes, 'number');
    assert.equal(typeof result.timing.runMs, 'number');
  });

  test('TypeScript: types are stripped, top-level await works', async () => {
    const code = [
      'interface P { x: number }',
      'const p: P = { x: 6 };',
      'const y: number = await Promise.resolve(7);',
      'console.log(p.x * y);',
      "console.error('to stderr');",
    ].join('\n');
    const result = await sandbox.execute({ profile: 'typescript-default', language: 'typescript', code });
    assert.equal(result.status, 'ok', explain(result));
    assert.equal(result.stdout, '42\n');
    assert.equal(result.stderr, 'to stderr\n');
    assert.equal(result.language, 'typescript');
  });

  test('TypeScript: reads a binary input file and writes an output file', async () => {
    const code = [
      "import { readFileSync, writeFileSync } from 'node:fs';",
      "const b: Buffer = readFileSync('in.bin');",
      "console.log(Array.from(b).join(','));",
      "writeFileSync('reversed.bin', Buffer.from(Array.from(b).reverse()));",
    ].join('\n');
    const result = await sandbox.execute({
      profile: 'typescript-default',
      code,
      files: { 'in.bin': new Uint8Array([0, 7, 128, 255]) },
    });
    assert.equal(result.status, 'ok', explain(result));
    assert.equal(result.stdout, '0,7,128,255\n');
    assert.deepEqual(Array.from(result.files['reversed.bin']!.bytes), [255, 128, 7, 0]);
  });

  test('binary input file (Uint8Array and { base64 }) arrives byte-exact', async () => {
    const all = new Uint8Array(256).map((_, i) => i);
    const code = [
      'import hashlib',
      "a = open('all.bin', 'rb').read()",
      "b = open('sub/b64.bin', 'rb').read()",
      "print(len(a), hashlib.sha256(a).hexdigest(), b.hex())",
    ].join('\n');
    const result = await sandbox.execute({
      profile: 'python-default',
      code,
      files: { 'all.bin': all, 'sub/b64.bin': { base64: Buffer.from([0xde, 0xad, 0xbe, 0xef]).toString('base64') } },
    });
    assert.equal(result.status, 'ok', explain(result));
    const sha = createHash('sha256').update(all).digest('hex');
    assert.equal(result.stdout, `256 ${sha} deadbeef\n`);
  });

  test('binary output file (bytes 0..255) arrives byte-identical, with metadata', async () => {
    const result = await sandbox.execute({
      profile: 'python-default',
      code: "open('out.bin', 'wb').write(bytes(range(256)))\nopen('note.txt', 'w').write('hi')",
      outputs: ['*.bin'],
    });
    assert.equal(result.status, 'ok', explain(result));
    assert.deepEqual(Object.keys(result.files), ['out.bin'], 'outputs filters note.txt out');
    const out = result.files['out.bin']!;
    assert.ok(out.bytes instanceof Uint8Array);
    assert.deepEqual(out.bytes, new Uint8Array(256).map((_, i) => i));
    assert.equal(out.size, 256);
    assert.equal(out.sha256, createHash('sha256').update(out.bytes).digest('hex'));
    assert.equal(typeof out.base64, 'string');
    assert.equal(typeof out.mimeType, 'string');
  });

  test('stdin (text) and env reach the program', async () => {
    const result = await sandbox.execute({
      profile: 'python-default',
      code: "import os, sys\nprint(sys.stdin.read().upper(), os.environ['GREETING'])",
      stdin: 'hello',
      env: { GREETING: 'bonjour' },
    });
    assert.equal(result.status, 'ok', explain(result));
    assert.equal(result.stdout, 'HELLO bonjour\n');
  });

  test('non-zero exit code is a result with status "error"', async () => {
    const result = await sandbox.execute({
      profile: 'python-default',
      code: "import sys\nprint('partial')\nsys.exit(3)",
    });
    assert.equal(result.status, 'error');
    assert.equal(result.exitCode, 3);
    assert.equal(result.stdout, 'partial\n');
  });

  test('an uncaught exception: exit code 1, traceback on stderr', async () => {
    const result = await sandbox.execute({ profile: 'python-default', code: "raise ValueError('boom')" });
    assert.equal(result.status, 'error');
    assert.equal(result.exitCode, 1);
    assert.match(result.stderr, /ValueError: boom/);
  });

  test('a TypeScript syntax error is a result with a structured error', async () => {
    const result = await sandbox.execute({ profile: 'typescript-default', code: 'const x: number = ;\nconsole.log(x)' });
    assert.equal(result.status, 'error');
    assert.equal(result.error?.type, 'SyntaxError');
    assert.equal(result.error?.line, 1);
  });

  test('timeout: while True: pass with timeout 1000 ms', async () => {
    const started = Date.now();
    const result = await sandbox.execute({ profile: 'python-default', code: 'while True: pass', timeout: 1000 });
    assert.equal(result.status, 'timeout', explain(result));
    assert.equal(result.timedOut, true);
    assert.ok(Date.now() - started < 20_000);
  });

  test('stdout over 1 MiB: stdoutTruncated, status output_limit', async () => {
    const result = await sandbox.execute({
      profile: 'python-default',
      code: "import sys\nfor _ in range(2048):\n    sys.stdout.write('x' * 1023 + '\\n')",
    });
    assert.equal(result.stdoutTruncated, true, explain(result));
    assert.equal(result.status, 'output_limit');
    assert.ok(result.stdout.length <= 1024 * 1024 + 16, String(result.stdout.length));
  });
});

describe('streaming', () => {
  test('the first chunk arrives well before the result', async () => {
    const code = 'import time\nfor i in range(5):\n    print(f"line {i}", flush=True)\n    time.sleep(0.2)';
    const started = performance.now();
    let firstChunkAt: number | undefined;
    let resultAt: number | undefined;
    let text = '';
    let result: ExecutionResult | undefined;
    for await (const ev of sandbox.executeStream({ profile: 'python-default', code })) {
      if (ev.type === 'stdout') {
        firstChunkAt ??= performance.now() - started;
        text += ev.text;
      } else if (ev.type === 'result') {
        resultAt = performance.now() - started;
        result = ev.result;
      }
    }
    assert.ok(result, 'a result event');
    assert.equal(result.status, 'ok', explain(result));
    assert.equal(text, 'line 0\nline 1\nline 2\nline 3\nline 4\n');
    assert.equal(result.stdout, text);
    assert.ok(firstChunkAt !== undefined && resultAt !== undefined);
    assert.ok(firstChunkAt < resultAt - 400, `first chunk at ${firstChunkAt} ms, result at ${resultAt} ms`);
  });

  test('stdout and stderr events are kinds of their own; result files are decoded', async () => {
    const events: StreamEvent[] = [];
    for await (const ev of sandbox.executeStream({
      profile: 'typescript-default',
      code: "import { writeFileSync } from 'node:fs';\nconsole.log('out');\nconsole.error('err');\nwriteFileSync('x.bin', Buffer.from([1, 2, 3]));",
    })) {
      events.push(ev);
    }
    const last = events.at(-1)!;
    assert.equal(last.type, 'result');
    assert.equal(events.filter((e) => e.type === 'stdout').map((e) => (e as { text: string }).text).join(''), 'out\n');
    assert.equal(events.filter((e) => e.type === 'stderr').map((e) => (e as { text: string }).text).join(''), 'err\n');
    if (last.type === 'result') assert.deepEqual(Array.from(last.result.files['x.bin']!.bytes), [1, 2, 3]);
  });

  test('events split across reads (the real server body re-chunked into 1..3 byte reads)', async () => {
    const rechunking = async (input: string, init?: RequestInit): Promise<Response> => {
      const res = await fetch(input, init);
      if (!res.body) return res;
      const reader = res.body.getReader();
      let pending: Uint8Array = new Uint8Array(0);
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          if (pending.length === 0) {
            const { done, value } = await reader.read();
            if (done) {
              controller.close();
              return;
            }
            pending = value;
          }
          const n = Math.min(pending.length, 1 + Math.floor(Math.random() * 3));
          controller.enqueue(pending.slice(0, n));
          pending = pending.subarray(n);
        },
        cancel(reason) {
          return reader.cancel(reason);
        },
      });
      return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
    };
    const client = new SandboxClient({ baseUrl: server.url, apiKey: KEY, fetch: rechunking });
    const code = "print('héllo ✓ 🎉')\nprint('second line', flush=True)\nopen('o.bin','wb').write(bytes(range(256)))";
    let text = '';
    let result: ExecutionResult | undefined;
    for await (const ev of client.executeStream({ profile: 'python-default', code })) {
      if (ev.type === 'result') result = ev.result;
      else text += ev.text;
    }
    assert.equal(text, 'héllo ✓ 🎉\nsecond line\n');
    assert.ok(result);
    assert.equal(result.status, 'ok');
    assert.deepEqual(result.files['o.bin']!.bytes, new Uint8Array(256).map((_, i) => i));
  });

  test('a refused streaming request throws a SandboxError on the first iteration', async () => {
    const iterate = async () => {
      for await (const _ of sandbox.executeStream({ profile: 'no-such-profile', code: 'print(1)' })) {
        assert.fail('no event expected');
      }
    };
    const e = await rejectsWith(iterate(), 'profile_not_found', 404);
    assert.equal(e.field, 'profile');
  });

  test('breaking out of the loop aborts the HTTP request', async () => {
    let aborted = false;
    const watching = async (input: string, init?: RequestInit): Promise<Response> => {
      init?.signal?.addEventListener('abort', () => {
        aborted = true;
      });
      return fetch(input, init);
    };
    const client = new SandboxClient({ baseUrl: server.url, apiKey: KEY, fetch: watching });
    const started = performance.now();
    const code = 'import time\nwhile True:\n    print("tick", flush=True)\n    time.sleep(0.1)';
    for await (const ev of client.executeStream({ profile: 'python-default', code, timeout: 60000 })) {
      assert.equal(ev.type, 'stdout');
      break;
    }
    assert.equal(aborted, true);
    assert.ok(performance.now() - started < 10_000);
  });

  test('an AbortSignal passed by the caller aborts execute() with its reason', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('caller gave up')), 300);
    await assert.rejects(
      sandbox.execute({ profile: 'python-default', code: 'import time\ntime.sleep(30)' }, { signal: controller.signal }),
      /caller gave up/,
    );
  });
});

describe('profiles', () => {
  test('profiles() lists the built-ins; profile(name) describes one', async () => {
    const list = await sandbox.profiles();
    const names = list.map((p) => p.name).sort();
    assert.ok(names.includes('python-default') && names.includes('typescript-default'), names.join(','));
    const py = await sandbox.profile('python-default');
    assert.equal(py.name, 'python-default');
    assert.equal(py.language, 'python');
    assert.equal(typeof py.timeoutMaxMs, 'number');
    assert.equal(typeof py.memoryMaxBytes, 'number');
    assert.ok(Array.isArray(py.mounts));
    assert.ok(Array.isArray(py.harnesses));
  });

  test('a restricted key sees only its profiles', async () => {
    const py = new SandboxClient({ baseUrl: server.url, apiKey: PY_ONLY_KEY });
    assert.deepEqual((await py.profiles()).map((p) => p.name), ['python-default']);
    await rejectsWith(py.profile('typescript-default'), 'forbidden_profile', 403);
    await rejectsWith(sandbox.profile('nope'), 'profile_not_found', 404);
  });

  test('health() and ready()', async () => {
    assert.equal(await sandbox.health(), true);
    await sandbox.ready();
  });
});

describe('one request shape (the HTTP API\'s)', () => {
  test('profile is optional: <language>-default, python without a language', async () => {
    const py = await sandbox.execute({ code: 'print(6*7)' });
    assert.equal(py.profile, 'python-default', explain(py));
    assert.equal(py.stdout, '42\n');
    const ts = await sandbox.execute({ language: 'typescript', code: 'console.log(6*7)' });
    assert.equal(ts.profile, 'typescript-default', explain(ts));
    assert.equal(ts.stdout, '42\n');
    // A key without a profile of the language is told so.
    const pyOnly = new SandboxClient({ baseUrl: server.url, apiKey: PY_ONLY_KEY });
    const e = await rejectsWith(pyOnly.execute({ language: 'typescript', code: '1' }), 'profile_not_found', 404);
    assert.equal(e.field, 'profile');
  });

  test('a timeout in seconds by mistake is refused with a hint naming the unit', async () => {
    const e = await rejectsWith(sandbox.execute({ code: 'print(1)', timeout: 20 }), 'invalid_timeout', 400);
    assert.equal(e.field, 'timeout');
    assert.match(e.detail, /milliseconds \(for 20 seconds, send 20000\)/);
    const ok = await sandbox.execute({ code: 'print(1)', timeout: 20000 });
    assert.equal(ok.status, 'ok', explain(ok));
  });
});

describe('error codes from the real server', () => {
  test('invalid_file_name names the field', async () => {
    const e = await rejectsWith(
      sandbox.execute({ profile: 'python-default', code: 'print(1)', files: { '../escape.txt': 'x' } }),
      'invalid_file_name',
      400,
    );
    assert.equal(e.field, 'files["../escape.txt"]');
    assert.match(e.detail, /escape/);
  });

  test('profile_not_found', async () => {
    const e = await rejectsWith(sandbox.execute({ profile: 'no-such-profile', code: 'print(1)' }), 'profile_not_found', 404);
    assert.equal(e.field, 'profile');
  });

  test('timeout_too_large', async () => {
    const max = (await sandbox.profile('python-default')).timeoutMaxMs;
    const e = await rejectsWith(
      sandbox.execute({ profile: 'python-default', code: 'print(1)', timeout: max + 1 }),
      'timeout_too_large',
      400,
    );
    assert.equal(e.field, 'timeout');
  });

  test('unauthorized: no key, and a wrong key', async () => {
    const anonymous = new SandboxClient({ baseUrl: server.url });
    await rejectsWith(anonymous.execute({ profile: 'python-default', code: 'print(1)' }), 'unauthorized', 401);
    await rejectsWith(anonymous.profiles(), 'unauthorized', 401);
    const wrong = new SandboxClient({ baseUrl: server.url, apiKey: 'not-a-key' });
    const e = await rejectsWith(wrong.execute({ profile: 'python-default', code: 'print(1)' }), 'unauthorized', 401);
    assert.equal(e.type, 'urn:sandbox:error:unauthorized');
  });

  test('forbidden_profile: a python-only key asks for typescript-default', async () => {
    const py = new SandboxClient({ baseUrl: server.url, apiKey: PY_ONLY_KEY });
    const ok = await py.execute({ profile: 'python-default', code: 'print(1)' });
    assert.equal(ok.stdout, '1\n');
    await rejectsWith(py.execute({ profile: 'typescript-default', code: 'console.log(1)' }), 'forbidden_profile', 403);
  });

  test('unsupported_language, empty_code, invalid_timeout', async () => {
    await rejectsWith(
      sandbox.execute({ profile: 'python-default', language: 'typescript', code: 'console.log(1)' }),
      'unsupported_language',
      400,
    );
    await rejectsWith(sandbox.execute({ profile: 'python-default', code: '   ' }), 'empty_code', 400);
    await rejectsWith(sandbox.execute({ profile: 'python-default', code: 'print(1)', timeout: 0 }), 'invalid_timeout', 400);
  });

  test('invalid_file_content: bad base64', async () => {
    await rejectsWith(
      sandbox.execute({ profile: 'python-default', code: 'print(1)', files: { 'a.bin': { base64: '***' } } }),
      'invalid_file_content',
      400,
    );
  });

  test('invalid_request: malformed JSON through a raw fetch', async () => {
    const res = await fetch(`${server.url}/v1/executions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' },
      body: '{"profile": "python-default", "code": ',
    });
    assert.equal(res.status, 400);
    assert.match(res.headers.get('content-type') ?? '', /application\/problem\+json/);
    const problem = (await res.json()) as { code: string; status: number };
    assert.equal(problem.code, 'invalid_request');
    const e = SandboxError.fromProblem(problem as never, res.status);
    assert.equal(e.code, 'invalid_request');
    assert.equal(e.status, 400);
  });

  test('invalid_request through the client: an unknown field', async () => {
    await rejectsWith(
      sandbox.execute({ profile: 'python-default', code: 'print(1)', ...({ bogus: true } as object) }),
      'invalid_request',
      400,
    );
  });
});
