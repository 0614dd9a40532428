/**
 * The data-analyst example (examples/data-analyst) through the SDK: the Palmer penguins CSV in;
 * Python prints statistics and returns a 1000 x 600 PNG, TypeScript returns its figures as
 * returnData (function harness). Environments come from `sandbox env install` into the directory
 * the Rust tests share ($SANDBOX_TEST_ENVIRONMENTS, else /var/tmp/sandbox-test-environments).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';

import { SandboxClient } from '@sandbox-service/client';
import { SANDBOX_BIN, startServer, type RunningServer } from './server.js';

const EXAMPLE = resolve(fileURLToPath(new URL('..', import.meta.url)), '../../examples/data-analyst');
const ENVIRONMENTS = process.env['SANDBOX_TEST_ENVIRONMENTS'] ?? '/var/tmp/sandbox-test-environments';
const KEY = 'test-key-examples';

let server: RunningServer;
let sandbox: SandboxClient;
let penguins: string;

before(async () => {
  server = await startServer({ keys: [{ name: 'all', key: KEY, profiles: ['*'] }], environmentsDir: ENVIRONMENTS });
  for (const name of ['python-analysis', 'typescript-analysis']) {
    execFileSync(SANDBOX_BIN, ['--config', server.configPath, 'env', 'install', name], { stdio: 'pipe' });
  }
  const path = execFileSync('bash', [resolve(EXAMPLE, 'fetch-data.sh')], { encoding: 'utf8' }).trim();
  penguins = readFileSync(path, 'utf8');
  sandbox = new SandboxClient({ baseUrl: server.url, apiKey: KEY });
});

after(async () => {
  await server?.stop();
});

test('python example: statistics and a 1000 x 600 PNG', async () => {
  const r = await sandbox.execute({
    profile: 'python-analysis',
    code: readFileSync(resolve(EXAMPLE, 'analysis.py'), 'utf8'),
    files: { 'data.csv': penguins },
    outputs: ['*.png'],
  });
  assert.equal(r.status, 'ok', JSON.stringify(r));
  assert.ok(r.stdout.startsWith('rows: 344, complete rows: 342\n'), r.stdout);
  assert.ok(r.stdout.includes('pearson r(flipper_length_mm, body_mass_g) = 0.871202\n'), r.stdout);
  const png = Buffer.from(r.files['output.png']!.base64, 'base64');
  assert.deepEqual([...png.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  assert.deepEqual([png.readUInt32BE(16), png.readUInt32BE(20)], [1000, 600]);
});

test('typescript example: figures as returnData', async () => {
  const r = await sandbox.execute({
    profile: 'typescript-analysis',
    code: readFileSync(resolve(EXAMPLE, 'analysis.ts'), 'utf8'),
    harness: 'function',
    files: { 'data.csv': penguins },
  });
  assert.equal(r.status, 'ok', JSON.stringify(r));
  const d = r.returnData as { rows: number; completeRows: number; species: Record<string, Record<string, { count: number; mean: number }>>; flipperBodyMassR: number };
  assert.deepEqual([d.rows, d.completeRows], [344, 342]);
  assert.deepEqual(Object.keys(d.species).sort(), ['Adelie', 'Chinstrap', 'Gentoo']);
  assert.equal(d.species['Adelie']!['flipper_length_mm']!.count, 151);
  assert.ok(Math.abs(d.species['Gentoo']!['body_mass_g']!.mean - 5076.016260162602) < 1e-9);
  assert.ok(Math.abs(d.flipperBodyMassR - 0.871202) < 1e-6);
});

test('a throw comes back structured with the caller line', async () => {
  const r = await sandbox.execute({
    profile: 'typescript-analysis',
    code: "import _ from 'lodash';\nconst xs: number[] = [];\nif (_.isEmpty(xs)) throw new RangeError('no data');\n",
  });
  assert.equal(r.status, 'error');
  assert.equal(r.error?.type, 'RangeError');
  assert.equal(r.error?.line, 3);
});
