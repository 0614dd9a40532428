/**
 * Wire types of the Sandbox Service HTTP API (JSON, camelCase), as the client exposes them.
 */

/** Content of an input file or of stdin: text (sent as UTF-8), bytes (sent as base64), or bytes already base64-encoded. */
export type FileInput = string | Uint8Array | ArrayBuffer | { base64: string };

/** Languages the service runs. */
export type Language = 'python' | 'typescript';

/** One execution request (`POST /v1/executions`). */
export interface ExecuteRequest {
  /**
   * Name of the profile to run under, e.g. `python-default`. Default (the same rule on every
   * door): `<language>-default` when the key may use it, else the first profile of that language
   * the key may use; `language` defaults to `python` when neither is given.
   */
  profile?: string;
  /** Language of `code`; defaults to the profile's language and must match it. */
  language?: Language | (string & {});
  /** The program's source. */
  code: string;
  /** `script` (default) or `function`. */
  harness?: 'script' | 'function' | (string & {});
  /**
   * Wall-clock timeout in **milliseconds** (20 s is `20000`); defaults to the profile's, may not
   * exceed its maximum. Below 100 it is refused with `invalid_timeout` (almost surely seconds).
   */
  timeout?: number;
  /** Input files by workspace-relative name: text, bytes (sent as base64), or `{ base64 }`. */
  files?: Record<string, FileInput>;
  /** Globs selecting which new or changed workspace files come back, e.g. `["*.png"]`; empty means all. */
  outputs?: string[];
  /** Bytes fed to the program's standard input. */
  stdin?: FileInput;
  /** Input value for the `function` harness. */
  input?: unknown;
  /** Extra environment variables, added to the profile's. */
  env?: Record<string, string>;
}

/** How an execution ended. */
export type ExecutionStatus =
  | 'ok'
  | 'error'
  | 'timeout'
  | 'memory_limit'
  | 'output_limit'
  | 'rejected'
  | 'internal_error';

/** One returned output file, as the server sends it. */
export interface WireOutputFile {
  /** The bytes, RFC 4648 base64. */
  base64: string;
  /** Size in bytes. */
  size: number;
  /** Lowercase hex SHA-256 of the bytes. */
  sha256: string;
  /** MIME type guessed from the extension. */
  mimeType: string;
}

/** One returned output file, with its bytes decoded. */
export interface OutputFile extends WireOutputFile {
  /** The file's bytes (decoded from `base64`). */
  bytes: Uint8Array;
}

/** A workspace entry that was not returned, and why. */
export interface SkippedFile {
  /** Workspace-relative name (lossy UTF-8 if the name was not UTF-8). */
  name: string;
  /**
   * `symlink`, `not_regular_file`, `non_utf8_name`, `name_too_long`, `too_deep`, `count_cap`,
   * `bytes_cap`, `entry_cap`, `unreadable`, `changed_while_reading`, or `list_cap`: the last
   * entry of a list past 1,000, standing for the rest (`count`).
   */
  reason: string;
  /** Size in bytes, where known. */
  size?: number;
  /** On the `list_cap` entry only: how many entries it stands for. */
  count?: number;
}

/** CPU time and peak memory of the execution. */
export interface ResourceUsage {
  cpuTimeMs: number;
  peakMemoryBytes: number;
}

/** Where the wall time went, in milliseconds. */
export interface Timing {
  queueMs: number;
  setupMs: number;
  runMs: number;
  collectMs: number;
  /** Started warm (forked from a template, or in a pooled sandbox) rather than cold. */
  warm?: boolean;
  /** How a warm run started (forked from a template at its start, in a pooled sandbox, or in a child forked ahead); absent when cold. */
  warmStart?: "template" | "pool" | "prefork";
}

/** Isolation actually enforced. */
export interface Enforcement {
  cgroup: string;
  landlockAbi: number;
  seccomp: boolean;
  network: string;
}

/** What an allowlist sandbox reached and what it was refused (times RFC 3339 UTC). */
export interface NetworkReport {
  allowed: Array<{ host?: string; address: string; port: number; protocol: string; bytesSent: number;
    bytesReceived: number; startedAt: string; durationMs: number; error?: string }>;
  /** `reason`: not_allowed, name_not_allowed, internal_address, protocol_not_allowed, too_many_connections, too_many_addresses. */
  blocked: Array<{ host?: string; address: string; port?: number; protocol: string; at: string; reason: string }>;
  allowedOmitted: number;
  blockedOmitted: number;
  /** Most memory (bytes) the engine's TCP buffers held at once for this run's connections. */
  bufferPeakBytes?: number;
}

/** A structured error inside a result: the program's exception or a service failure. */
export interface ExecError {
  type: string;
  message: string;
  field?: string;
  line?: number;
  column?: number;
  traceback?: string;
}

/** The result of one execution, with output files decoded. */
export interface ExecutionResult<F = OutputFile> {
  executionId: string;
  status: ExecutionStatus;
  profile: string;
  language?: Language;
  /** Captured standard output (lossy UTF-8). */
  stdout: string;
  /** Captured standard error (lossy UTF-8). */
  stderr: string;
  /** The exact stdout bytes, base64, present only when stdout was not valid UTF-8. */
  stdoutBase64?: string;
  /** The exact stderr bytes, base64, present only when stderr was not valid UTF-8. */
  stderrBase64?: string;
  /** Exit code (128+signal when a signal ended it); absent if the program never ran. */
  exitCode?: number;
  signal?: number;
  signalName?: string;
  /** Wall time from receipt to result, in milliseconds. */
  durationMs: number;
  timedOut: boolean;
  oomKilled: boolean;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /** New or changed workspace files by workspace-relative name. */
  files: Record<string, F>;
  skippedFiles?: SkippedFile[];
  killedAtTeardown: number;
  /** The `function` harness's return value. */
  returnData?: unknown;
  resourceUsage: ResourceUsage;
  timing: Timing;
  /** Connections allowed and attempts blocked (allowlist profiles only). */
  network?: NetworkReport;
  enforcement?: Enforcement;
  error?: ExecError;
}

/** The result exactly as the server sends it (files not decoded). */
export type WireExecutionResult = ExecutionResult<WireOutputFile>;

/** One event of {@link SandboxClient.executeStream}. */
export type StreamEvent =
  | { type: 'stdout'; text: string }
  | { type: 'stderr'; text: string }
  | { type: 'result'; result: ExecutionResult };

/** A directory the profile mounts into the sandbox. */
export interface MountInfo {
  path: string;
  readOnly: boolean;
}

/** A profile as `GET /v1/profiles` describes it. */
export interface ProfileInfo {
  name: string;
  language: Language;
  description: string;
  harness: string;
  harnesses: string[];
  memoryMaxBytes: number;
  cpuMax: number;
  pidsMax: number;
  timeoutMs: number;
  timeoutMaxMs: number;
  workspaceMaxBytes: number;
  tmpMaxBytes: number;
  stdoutMaxBytes: number;
  stderrMaxBytes: number;
  filesMaxCount: number;
  filesMaxBytes: number;
  network: string;
  mounts: MountInfo[];
}

/** Stable error codes of the service, plus the client's own (`network_error`, `invalid_response`). */
export type ErrorCode =
  | 'invalid_request'
  | 'profile_not_found'
  | 'unsupported_language'
  | 'unsupported_harness'
  | 'empty_code'
  | 'code_too_large'
  | 'invalid_file_name'
  | 'invalid_file_content'
  | 'input_too_large'
  | 'timeout_too_large'
  | 'invalid_timeout'
  | 'invalid_env'
  | 'invalid_output_pattern'
  | 'runtime_unavailable'
  | 'invalid_config'
  | 'internal_error'
  | 'unauthorized'
  | 'forbidden_profile'
  | 'forbidden'
  | 'queue_full'
  | 'body_too_large'
  | 'not_found'
  | 'shutting_down'
  | 'rate_limited'
  | 'host_not_allowed'
  | 'origin_not_allowed'
  | 'concurrency_limited'
  | 'audit_unavailable'
  | 'network_error'
  | 'invalid_response'
  | (string & {});

/** An `application/problem+json` body (RFC 9457) as the service sends it. */
export interface Problem {
  type: string;
  title: string;
  status: number;
  code: ErrorCode;
  detail: string;
  field?: string;
  executionId?: string;
}
