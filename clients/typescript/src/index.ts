export { SandboxClient, decodeResult, encodeRequest } from './client.js';
export type { CallOptions, FetchLike, SandboxClientOptions } from './client.js';
export { SandboxError, isProblem, parseRetryAfter } from './errors.js';
export type { SandboxErrorInit } from './errors.js';
export { SseParser } from './sse.js';
export type { SseEvent } from './sse.js';
export { decodeBase64, encodeBase64 } from './base64.js';
export type * from './types.js';
