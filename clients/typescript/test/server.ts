/**
 * Starts a real `sandbox serve` for the tests: a temporary data directory (mode 0755), a
 * temporary config file, port 0; the URL comes from the one line the server prints.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The package root (this file runs from build-test/). */
const PACKAGE_ROOT = fileURLToPath(new URL('..', import.meta.url));

/** The server binary: $SANDBOX_BIN, else ../../target/debug/sandbox relative to clients/typescript. */
export const SANDBOX_BIN = process.env['SANDBOX_BIN']
  ? resolve(process.env['SANDBOX_BIN'])
  : resolve(PACKAGE_ROOT, '../../target/debug/sandbox');

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

export interface KeySpec {
  name: string;
  key: string;
  profiles: string[];
}

export interface ServerOptions {
  keys?: KeySpec[];
  /** Extra `[service]` settings, e.g. `{ max_concurrency: 1, queue_max: 0 }`. */
  service?: Record<string, number>;
  /** `[runtime] environments_dir`: where installed package environments are found. */
  environmentsDir?: string;
}

export interface RunningServer {
  url: string;
  /** The server's config file (for `sandbox --config ... env install`). */
  configPath: string;
  /** What the server wrote to stderr so far (for failure messages). */
  logs(): string;
  stop(): Promise<void>;
}

function toml(options: ServerOptions): string {
  const lines = [];
  if (options.environmentsDir) lines.push('[runtime]', `environments_dir = ${JSON.stringify(options.environmentsDir)}`, '');
  lines.push('[service]');
  for (const [k, v] of Object.entries(options.service ?? {})) lines.push(`${k} = ${v}`);
  for (const k of options.keys ?? []) {
    lines.push('', '[[service.api_keys]]');
    lines.push(`name = ${JSON.stringify(k.name)}`);
    lines.push(`sha256 = "${sha256Hex(k.key)}"`);
    lines.push(`profiles = [${k.profiles.map((p) => JSON.stringify(p)).join(', ')}]`);
  }
  return lines.join('\n') + '\n';
}

export async function startServer(options: ServerOptions = {}): Promise<RunningServer> {
  if (!existsSync(SANDBOX_BIN)) {
    throw new Error(`sandbox binary not found at ${SANDBOX_BIN}: run 'cargo build -p sandbox' at the repo root or set SANDBOX_BIN`);
  }
  const base = await mkdtemp(join(tmpdir(), 'sandbox-ts-client-'));
  await chmod(base, 0o755);
  const dataDir = join(base, 'data');
  await mkdir(dataDir);
  await chmod(dataDir, 0o755);
  const configPath = join(base, 'config.toml');
  await writeFile(configPath, toml(options));

  const child: ChildProcess = spawn(
    SANDBOX_BIN,
    ['--data-dir', dataDir, '--config', configPath, 'serve', '--listen', '127.0.0.1:0'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (d: string) => {
    stderr = (stderr + d).slice(-64 * 1024);
  });
  let exited = false;
  const exitedPromise = new Promise<void>((res) => child.once('exit', () => {
    exited = true;
    res();
  }));

  const url = await new Promise<string>((res, rej) => {
    let out = '';
    const timer = setTimeout(() => rej(new Error(`server did not start within 30 s; stderr:\n${stderr}`)), 30_000);
    child.stdout!.setEncoding('utf8');
    child.stdout!.on('data', (d: string) => {
      out += d;
      const m = /^listening on (http:\/\/127\.0\.0\.1:\d+) \(\d+ execution slots?\)$/m.exec(out);
      if (m) {
        clearTimeout(timer);
        res(m[1]!);
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      rej(new Error(`server exited (${code ?? signal}) before listening; stdout: ${out}\nstderr:\n${stderr}`));
    });
    child.once('error', (e) => {
      clearTimeout(timer);
      rej(e);
    });
  });

  return {
    url,
    configPath,
    logs: () => stderr,
    async stop() {
      if (!exited) {
        child.kill('SIGTERM');
        const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exitedPromise;
        clearTimeout(killer);
      }
      await rm(base, { recursive: true, force: true });
    },
  };
}
