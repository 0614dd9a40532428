/** Tests of the pieces that need no server: base64, the SSE parser, request encoding, errors. */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';

import {
  SandboxClient,
  SandboxError,
  SseParser,
  decodeBase64,
  encodeBase64,
  encodeRequest,
  parseRetryAfter,
  type SseEvent,
} from '@sandbox-service/client';

describe('base64', () => {
  test('matches Buffer for every length up to 70 and a large buffer', () => {
    for (let n = 0; n <= 70; n++) {
      const bytes = randomBytes(n);
      const b64 = encodeBase64(new Uint8Array(bytes));
      assert.equal(b64, bytes.toString('base64'));
      assert.deepEqual(Buffer.from(decodeBase64(b64)), bytes);
    }
    const big = randomBytes(1_000_003);
    assert.equal(encodeBase64(big), big.toString('base64'));
    assert.deepEqual(Buffer.from(decodeBase64(big.toString('base64'))), big);
  });

  test('rejects invalid input', () => {
    assert.throws(() => decodeBase64('a$bc'), TypeError);
    assert.throws(() => decodeBase64('abcde'), TypeError);
  });
});

describe('SseParser', () => {
  const stream =
    ': keep-alive comment\n\n' +
    'event: stdout\ndata: {"text":"héllo ✓ 🎉"}\n\n' +
    'event: stderr\r\ndata: {"text":"e"}\r\n\r\n' +
    'event: multi\rdata: a\rdata:b\r\r' +
    'data: plain\nid: 7\n\n' +
    'event: result\ndata: {"done":true}\n\n' +
    'event: unterminated\ndata: x\n';
  const expected: SseEvent[] = [
    { event: 'stdout', data: '{"text":"héllo ✓ 🎉"}' },
    { event: 'stderr', data: '{"text":"e"}' },
    { event: 'multi', data: 'a\nb' },
    { event: 'message', data: 'plain', id: '7' },
    { event: 'result', data: '{"done":true}', id: '7' },
  ];
  const bytes = new TextEncoder().encode(stream);

  test('parses a stream given whole', () => {
    const p = new SseParser();
    assert.deepEqual([...p.push(bytes), ...p.end()], expected);
  });

  test('parses the same stream split at every byte, and in random chunks', () => {
    const oneByOne = new SseParser();
    const got: SseEvent[] = [];
    for (let i = 0; i < bytes.length; i++) got.push(...oneByOne.push(bytes.subarray(i, i + 1)));
    got.push(...oneByOne.end());
    assert.deepEqual(got, expected);
    for (let round = 0; round < 200; round++) {
      const p = new SseParser();
      const out: SseEvent[] = [];
      let i = 0;
      while (i < bytes.length) {
        const n = 1 + Math.floor(Math.random() * 12);
        out.push(...p.push(bytes.subarray(i, i + n)));
        i += n;
      }
      out.push(...p.end());
      assert.deepEqual(out, expected);
    }
  });

  test('every two-way split gives the same events', () => {
    for (let cut = 0; cut <= bytes.length; cut++) {
      const p = new SseParser();
      const out = [...p.push(bytes.subarray(0, cut)), ...p.push(bytes.subarray(cut)), ...p.end()];
      assert.deepEqual(out, expected, `cut at ${cut}`);
    }
  });
});

describe('request encoding', () => {
  test('bytes become base64, text and { base64 } pass through', () => {
    const body = encodeRequest({
      profile: 'p',
      code: 'c',
      files: { 'a.txt': 'text', 'b.bin': new Uint8Array([0, 1, 255]), 'c.bin': { base64: 'AAE=' } },
      stdin: new Uint8Array([104, 105]),
    });
    assert.deepEqual(body, {
      profile: 'p',
      code: 'c',
      files: { 'a.txt': 'text', 'b.bin': { base64: 'AAH/' }, 'c.bin': { base64: 'AAE=' } },
      stdin: { base64: 'aGk=' },
    });
  });
});

describe('errors', () => {
  test('Retry-After as seconds and as a date', () => {
    assert.equal(parseRetryAfter('3'), 3);
    assert.equal(parseRetryAfter(null), undefined);
    const d = parseRetryAfter(new Date(Date.now() + 5000).toUTCString());
    assert.ok(d !== undefined && d >= 3 && d <= 6, String(d));
  });

  test('a non-problem error response and a failing fetch', async () => {
    const html = new SandboxClient({
      baseUrl: 'http://example.invalid/',
      fetch: async () => new Response('<h1>Bad gateway</h1>', { status: 502, headers: { 'content-type': 'text/html' } }),
    });
    await assert.rejects(html.profiles(), (e: unknown) => {
      assert.ok(e instanceof SandboxError);
      assert.equal(e.code, 'invalid_response');
      assert.equal(e.status, 502);
      return true;
    });
    const down = new SandboxClient({
      baseUrl: 'http://example.invalid',
      fetch: async () => {
        throw new TypeError('fetch failed');
      },
    });
    await assert.rejects(down.execute({ profile: 'p', code: 'x' }), (e: unknown) => {
      assert.ok(e instanceof SandboxError);
      assert.equal(e.code, 'network_error');
      assert.equal(e.status, 0);
      return true;
    });
  });

  test('a stream that ends without a result is an error', async () => {
    const client = new SandboxClient({
      baseUrl: 'http://example.invalid',
      fetch: async () =>
        new Response('event: stdout\ndata: {"text":"a"}\n\n', { headers: { 'content-type': 'text/event-stream' } }),
    });
    const seen: string[] = [];
    await assert.rejects(
      (async () => {
        for await (const ev of client.executeStream({ profile: 'p', code: 'x' })) seen.push(ev.type);
      })(),
      (e: unknown) => e instanceof SandboxError && e.code === 'invalid_response',
    );
    assert.deepEqual(seen, ['stdout']);
  });
});
