/** Service limits through the client: queue_full (with Retry-After) and body_too_large. */
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';

import { SandboxClient, SandboxError } from '@sandbox-service/client';
import { startServer, type RunningServer } from './server.js';

const KEY = 'limits-key';
const servers: RunningServer[] = [];

after(async () => {
  await Promise.all(servers.map((s) => s.stop()));
});

async function start(service: Record<string, number>): Promise<SandboxClient> {
  const s = await startServer({ keys: [{ name: 'k', key: KEY, profiles: ['*'] }], service });
  servers.push(s);
  return new SandboxClient({ baseUrl: s.url, apiKey: KEY });
}

describe('one slot, no queue', () => {
  test('a second concurrent execution is refused with queue_full and retryAfter', async () => {
    const sandbox = await start({ max_concurrency: 1, queue_max: 0 });
    // Hold the only slot: stream a long program and wait for its first output, so it is surely admitted.
    const long = sandbox.executeStream({
      profile: 'python-default',
      code: 'import time\nprint("started", flush=True)\ntime.sleep(3)\nprint("done")',
      timeout: 30000,
    });
    const first = await long.next();
    assert.equal(first.done, false);
    assert.ok(first.value.type === 'stdout' && first.value.text.startsWith('started'), JSON.stringify(first.value));
    let streamed = first.value.text;

    const second = sandbox.execute({ profile: 'python-default', code: 'print(2)' });
    const e = await second.then(
      () => assert.fail('the second execution should be refused'),
      (err: unknown) => err,
    );
    assert.ok(e instanceof SandboxError, String(e));
    assert.equal(e.code, 'queue_full');
    assert.equal(e.status, 429);
    assert.equal(typeof e.retryAfter, 'number');
    assert.ok(e.retryAfter! >= 0);

    // The first one still completes normally.
    for await (const ev of long) {
      if (ev.type === 'stdout') streamed += ev.text;
      if (ev.type === 'result') {
        assert.equal(ev.result.status, 'ok');
        assert.equal(ev.result.stdout, 'started\ndone\n');
      }
    }
    assert.equal(streamed, 'started\ndone\n');

    // And the slot is free again.
    const third = await sandbox.execute({ profile: 'python-default', code: 'print(3)' });
    assert.equal(third.stdout, '3\n');
  });

  test('breaking out of a stream frees the slot for the next execution', async () => {
    const sandbox = await start({ max_concurrency: 1, queue_max: 0 });
    const code = 'import time\nwhile True:\n    print("tick", flush=True)\n    time.sleep(0.1)';
    for await (const ev of sandbox.executeStream({ profile: 'python-default', code, timeout: 60000 })) {
      assert.equal(ev.type, 'stdout');
      break;
    }
    // The server notices the closed connection and tears the execution down; retry briefly.
    const deadline = Date.now() + 15_000;
    for (;;) {
      try {
        const r = await sandbox.execute({ profile: 'python-default', code: 'print("free")' });
        assert.equal(r.stdout, 'free\n');
        break;
      } catch (e) {
        if (!(e instanceof SandboxError) || e.code !== 'queue_full' || Date.now() > deadline) throw e;
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  });
});

describe('small body limit', () => {
  test('code larger than body_max_bytes is refused with body_too_large', async () => {
    const sandbox = await start({ body_max_bytes: 2048 });
    const small = await sandbox.execute({ profile: 'python-default', code: 'print("ok")' });
    assert.equal(small.stdout, 'ok\n');
    const code = `# ${'x'.repeat(4096)}\nprint(1)`;
    await assert.rejects(sandbox.execute({ profile: 'python-default', code }), (e: unknown) => {
      assert.ok(e instanceof SandboxError, String(e));
      assert.equal(e.code, 'body_too_large');
      assert.equal(e.status, 413);
      return true;
    });
  });
});
