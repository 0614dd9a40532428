import { decodeBase64, encodeBase64 } from './base64.js';
import { SandboxError, isProblem, parseRetryAfter, type SandboxErrorInit } from './errors.js';
import { SseParser } from './sse.js';
import type {
  ExecuteRequest,
  ExecutionResult,
  FileInput,
  OutputFile,
  ProfileInfo,
  StreamEvent,
  WireExecutionResult,
} from './types.js';

/** The subset of `fetch` the client uses; pass your own to add retries, logging, proxies or mocks. */
export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

/** Options of {@link SandboxClient}. */
export interface SandboxClientOptions {
  /** Where the service listens, e.g. `http://127.0.0.1:8080` (a path prefix is kept). */
  baseUrl: string;
  /** API key, sent as `Authorization: Bearer <key>`. */
  apiKey?: string;
  /** A `fetch` implementation; defaults to the global one. */
  fetch?: FetchLike;
  /** Extra headers sent with every request. */
  headers?: Record<string, string>;
}

/** Per-call options. */
export interface CallOptions {
  /** Aborts the HTTP request (and so the execution on the server) when signalled. */
  signal?: AbortSignal;
}

/** The wire form of a file or stdin content. */
type WireContent = string | { base64: string };

/** Client of the Sandbox Service HTTP API. */
export class SandboxClient {
  readonly baseUrl: string;
  private readonly apiKey: string | undefined;
  private readonly fetchImpl: FetchLike;
  private readonly extraHeaders: Record<string, string>;

  constructor(options: SandboxClientOptions) {
    if (!options || typeof options.baseUrl !== 'string' || options.baseUrl === '') {
      throw new TypeError('SandboxClient: baseUrl is required');
    }
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.apiKey = options.apiKey;
    const f = options.fetch ?? (globalThis.fetch as FetchLike | undefined);
    if (typeof f !== 'function') {
      throw new TypeError('SandboxClient: no global fetch; pass options.fetch');
    }
    // Unbound global fetch throws "Illegal invocation" in browsers.
    this.fetchImpl = options.fetch ? options.fetch : f.bind(globalThis);
    this.extraHeaders = { ...(options.headers ?? {}) };
  }

  /**
   * Runs one execution and returns its result. Any program outcome (non-zero exit, timeout,
   * memory or output limit) is a result; a refused request throws {@link SandboxError}.
   */
  async execute(request: ExecuteRequest, options: CallOptions = {}): Promise<ExecutionResult> {
    const res = await this.send('POST', '/v1/executions', encodeRequest(request), 'application/json', options.signal);
    if (!res.ok) throw await errorFrom(res);
    const body = await readJson(res, options.signal);
    return decodeResult(body, res.status);
  }

  /**
   * Runs one execution, yielding its stdout and stderr as the program writes them, then the
   * result. The request is sent when iteration starts; leaving the loop early (`break`,
   * `return`, a thrown error) aborts the HTTP request, which ends the execution on the server.
   *
   * ```ts
   * for await (const ev of sandbox.executeStream({ profile: 'python-default', code })) {
   *   if (ev.type === 'result') console.log(ev.result.exitCode);
   *   else process.stdout.write(ev.text);
   * }
   * ```
   */
  async *executeStream(request: ExecuteRequest, options: CallOptions = {}): AsyncGenerator<StreamEvent, void, undefined> {
    const body = encodeRequest(request);
    const controller = new AbortController();
    const outer = options.signal;
    const onAbort = (): void => controller.abort(outer?.reason);
    if (outer) {
      if (outer.aborted) throw abortReason(outer);
      outer.addEventListener('abort', onAbort, { once: true });
    }
    let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
    let finished = false;
    try {
      const res = await this.send('POST', '/v1/executions', body, 'text/event-stream', controller.signal, outer);
      if (!res.ok) throw await errorFrom(res);
      const type = (res.headers.get('content-type') ?? '').toLowerCase();
      if (!type.includes('text/event-stream')) {
        // A server (or proxy) that ignored Accept: the whole result at once.
        const result = decodeResult(await readJson(res, outer), res.status);
        finished = true;
        yield { type: 'result', result };
        return;
      }
      if (!res.body) {
        throw new SandboxError({ code: 'invalid_response', status: res.status, message: 'the event stream has no body' });
      }
      reader = res.body.getReader();
      const parser = new SseParser();
      for (;;) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (e) {
          throw networkError(e, outer, 'reading the event stream failed');
        }
        const events = chunk.done ? parser.end() : parser.push(chunk.value);
        for (const ev of events) {
          if (ev.event === 'stdout' || ev.event === 'stderr') {
            const data = parseJson(ev.data, res.status) as { text?: unknown };
            yield { type: ev.event, text: typeof data.text === 'string' ? data.text : '' };
          } else if (ev.event === 'result') {
            const result = decodeResult(parseJson(ev.data, res.status), res.status);
            finished = true;
            // execute() gets these as problem responses; a stream carries them as results.
            const failure = failedResult(result);
            if (failure) throw failure;
            yield { type: 'result', result };
            return;
          } else if (ev.event === 'error') {
            const problem = parseJson(ev.data, res.status);
            finished = true;
            if (isProblem(problem)) throw SandboxError.fromProblem(problem, res.status);
            throw new SandboxError({ code: 'invalid_response', status: res.status, message: `unexpected error event: ${ev.data}` });
          }
          // Other event types are ignored (forward compatibility).
        }
        if (chunk.done) {
          throw new SandboxError({
            code: 'invalid_response',
            status: res.status,
            message: 'the event stream ended without a result',
          });
        }
      }
    } finally {
      outer?.removeEventListener('abort', onAbort);
      if (!finished) controller.abort();
      if (reader) reader.cancel().catch(() => undefined);
    }
  }

  /** The profiles the caller may use (`GET /v1/profiles`). */
  async profiles(options: CallOptions = {}): Promise<ProfileInfo[]> {
    const res = await this.send('GET', '/v1/profiles', undefined, 'application/json', options.signal);
    if (!res.ok) throw await errorFrom(res);
    const body = (await readJson(res, options.signal)) as { profiles?: unknown };
    if (!body || !Array.isArray(body.profiles)) {
      throw new SandboxError({ code: 'invalid_response', status: res.status, message: 'expected { profiles: [...] }' });
    }
    return body.profiles as ProfileInfo[];
  }

  /** One profile (`GET /v1/profiles/{name}`); `profile_not_found` or `forbidden_profile` otherwise. */
  async profile(name: string, options: CallOptions = {}): Promise<ProfileInfo> {
    const res = await this.send('GET', `/v1/profiles/${encodeURIComponent(name)}`, undefined, 'application/json', options.signal);
    if (!res.ok) throw await errorFrom(res);
    return (await readJson(res, options.signal)) as ProfileInfo;
  }

  /** Whether the service process is up (`GET /healthz` answers 200). */
  async health(options: CallOptions = {}): Promise<boolean> {
    const res = await this.send('GET', '/healthz', undefined, 'text/plain', options.signal);
    await res.body?.cancel().catch(() => undefined);
    return res.ok;
  }

  /** Resolves when the host can run executions (`GET /readyz`); throws `runtime_unavailable` otherwise. */
  async ready(options: CallOptions = {}): Promise<void> {
    const res = await this.send('GET', '/readyz', undefined, 'application/json', options.signal);
    if (!res.ok) throw await errorFrom(res);
    await res.body?.cancel().catch(() => undefined);
  }

  private async send(
    method: string,
    path: string,
    body: unknown,
    accept: string,
    signal: AbortSignal | undefined,
    userSignal: AbortSignal | undefined = signal,
  ): Promise<Response> {
    const headers: Record<string, string> = { ...this.extraHeaders, accept };
    if (this.apiKey !== undefined) headers['authorization'] = `Bearer ${this.apiKey}`;
    const init: RequestInit = { method, headers };
    if (body !== undefined) {
      headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    if (signal) init.signal = signal;
    try {
      return await this.fetchImpl(`${this.baseUrl}${path}`, init);
    } catch (e) {
      throw networkError(e, userSignal, `${method} ${path} failed`);
    }
  }
}

function encodeContent(value: FileInput, field: string): WireContent {
  if (typeof value === 'string') return value;
  if (value instanceof Uint8Array) return { base64: encodeBase64(value) };
  if (value instanceof ArrayBuffer) return { base64: encodeBase64(new Uint8Array(value)) };
  if (ArrayBuffer.isView(value)) {
    const v = value as ArrayBufferView;
    return { base64: encodeBase64(new Uint8Array(v.buffer, v.byteOffset, v.byteLength)) };
  }
  if (value && typeof value === 'object' && typeof (value as { base64?: unknown }).base64 === 'string') {
    return { base64: (value as { base64: string }).base64 };
  }
  throw new TypeError(`${field}: expected a string, a Uint8Array or { base64 }`);
}

/** The JSON body of a request: bytes become `{ base64 }`. */
export function encodeRequest(request: ExecuteRequest): Record<string, unknown> {
  if (!request || typeof request !== 'object') throw new TypeError('execute: request must be an object');
  const { files, stdin, ...rest } = request;
  const body: Record<string, unknown> = { ...rest };
  if (files !== undefined) {
    const wire: Record<string, WireContent> = {};
    for (const [name, content] of Object.entries(files)) wire[name] = encodeContent(content, `files[${JSON.stringify(name)}]`);
    body['files'] = wire;
  }
  if (stdin !== undefined) body['stdin'] = encodeContent(stdin, 'stdin');
  return body;
}

/** A result with every output file's `bytes` decoded from its base64. */
export function decodeResult(value: unknown, status = 200): ExecutionResult {
  if (!value || typeof value !== 'object' || typeof (value as { executionId?: unknown }).executionId !== 'string') {
    throw new SandboxError({ code: 'invalid_response', status, message: 'the response is not an execution result' });
  }
  const wire = value as WireExecutionResult;
  const files: Record<string, OutputFile> = {};
  for (const [name, f] of Object.entries(wire.files ?? {})) {
    let bytes: Uint8Array;
    try {
      bytes = decodeBase64(f.base64);
    } catch (e) {
      throw new SandboxError({ code: 'invalid_response', status, message: `file ${name}: ${(e as Error).message}`, cause: e });
    }
    files[name] = { ...f, bytes };
  }
  return { ...wire, files };
}

/** HTTP statuses of the service's error codes (for failures that arrive inside a stream). */
const STATUS_OF: Record<string, number> = {
  unauthorized: 401,
  forbidden_profile: 403,
  forbidden: 403,
  profile_not_found: 404,
  not_found: 404,
  queue_full: 429,
  rate_limited: 429,
  host_not_allowed: 421,
  origin_not_allowed: 403,
  concurrency_limited: 429,
  audit_unavailable: 503,
  body_too_large: 413,
  input_too_large: 413,
  code_too_large: 413,
  runtime_unavailable: 503,
  shutting_down: 503,
  internal_error: 500,
  invalid_config: 500,
};

/** A `rejected` or `internal_error` result as the error `execute()` would have thrown. */
function failedResult(result: ExecutionResult): SandboxError | undefined {
  if (result.status !== 'rejected' && result.status !== 'internal_error') return undefined;
  const code = result.error?.type ?? result.status;
  const init: SandboxErrorInit = {
    code,
    status: STATUS_OF[code] ?? (result.status === 'internal_error' ? 500 : 400),
    message: result.error?.message ?? result.status,
    executionId: result.executionId,
  };
  if (result.error?.field !== undefined) init.field = result.error.field;
  return new SandboxError(init);
}

async function errorFrom(res: Response): Promise<SandboxError> {
  const retryAfter = parseRetryAfter(res.headers.get('retry-after'));
  let text = '';
  try {
    text = await res.text();
  } catch {
    // keep the status alone
  }
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  if (isProblem(body)) return SandboxError.fromProblem(body, res.status, retryAfter);
  const init = {
    code: 'invalid_response',
    status: res.status,
    message: `HTTP ${res.status}${res.statusText ? ` ${res.statusText}` : ''}${text ? `: ${text.slice(0, 500)}` : ''}`,
    ...(retryAfter !== undefined ? { retryAfter } : {}),
  };
  return new SandboxError(init);
}

async function readJson(res: Response, signal: AbortSignal | undefined): Promise<unknown> {
  let text: string;
  try {
    text = await res.text();
  } catch (e) {
    throw networkError(e, signal, 'reading the response failed');
  }
  return parseJson(text, res.status);
}

function parseJson(text: string, status: number): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new SandboxError({ code: 'invalid_response', status, message: `invalid JSON: ${text.slice(0, 200)}`, cause: e });
  }
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}

/** Aborts the caller asked for pass through unchanged; anything else is a `network_error`. */
function networkError(e: unknown, signal: AbortSignal | undefined, what: string): unknown {
  if (e instanceof SandboxError) return e;
  if (signal?.aborted) return abortReason(signal);
  const message = e instanceof Error ? `${what}: ${e.message}` : what;
  return new SandboxError({ code: 'network_error', status: 0, message, cause: e });
}
