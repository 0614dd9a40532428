/**
 * Runs the JavaScript/TypeScript blocks of the READMEs (those marked
 * `<!-- doc-test: sdk-ts -->`, see crates/sandbox/tests/it/docs.rs) against a real
 * `sandbox serve`: this package's README example as written (it reads SANDBOX_URL and
 * SANDBOX_API_KEY), and the repository README's fragment with a prelude defining the names it
 * uses (`sandbox`, `code`, `csvText`). Each runs as an ES module in this package's directory, so
 * `@sandbox-service/client` resolves to the build under test.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';

import { startServer, type RunningServer } from './server.js';

const PACKAGE = fileURLToPath(new URL('..', import.meta.url));
const READMES = [resolve(PACKAGE, 'README.md'), resolve(PACKAGE, '../../README.md')];
const MARKER = '<!-- doc-test: sdk-ts -->';
const KEY = 'test-key-readme';
const PRELUDE = `import { SandboxClient } from '@sandbox-service/client';
const sandbox = new SandboxClient({ baseUrl: process.env.SANDBOX_URL, apiKey: process.env.SANDBOX_API_KEY });
const code = "open('output.png', 'wb').write(b'png')\\nprint(open('data.csv').read())";
const csvText = 'a,b\\n1,2\\n';
`;

/** [where, source] of every marked block. */
function blocks(): [string, string][] {
  const out: [string, string][] = [];
  for (const path of READMES) {
    const lines = readFileSync(path, 'utf8').split('\n');
    lines.forEach((line, i) => {
      if (line.trim() !== MARKER) return;
      assert.match(lines[i + 1] ?? '', /^```(js|ts)/, `${path}:${i + 2}: ${MARKER} must precede a js or ts block`);
      const end = lines.findIndex((l, j) => j > i + 1 && l.startsWith('```'));
      out.push([`${path}:${i + 2}`, lines.slice(i + 2, end).join('\n') + '\n']);
    });
  }
  return out;
}

let server: RunningServer;

before(async () => {
  server = await startServer({ keys: [{ name: 'all', key: KEY, profiles: ['*'] }] });
});

after(async () => {
  await server?.stop();
});

test('the READMEs have blocks to run', () => {
  assert.ok(blocks().length >= 2, JSON.stringify(blocks()));
});

for (const [where, source] of blocks()) {
  test(`README block ${where} runs`, async () => {
    const fragment = !source.includes('import ');
    const file = resolve(PACKAGE, `.readme-block-${process.pid}.mjs`);
    writeFileSync(file, (fragment ? PRELUDE : '') + source);
    try {
      const { stdout } = await promisify(execFile)(process.execPath, [file], {
        cwd: PACKAGE,
        env: { ...process.env, SANDBOX_URL: server.url, SANDBOX_API_KEY: KEY },
      });
      if (!fragment) assert.match(stdout, /total 14/, stdout);
    } finally {
      rmSync(file, { force: true });
    }
  });
}
