// The Sandbox Service's TypeScript harness (argv: MODE, "script", "function" or "pool").
// "script" imports /code/main.mjs (the transpiled caller code, with an inline source map);
// "function" then calls its default export (or its export named main) with the JSON value of
// /code/input.json and awaits it. The return value, or an uncaught error as
// {type, message, traceback, line, column} with the caller's main.ts positions, goes to the
// side channel (fd 4) as one JSON object; never to stdout.
// "pool" (a pre-started sandbox of a warm pool): imports the modules named in SANDBOX_PRELOAD,
// writes one byte "R" to fd 4 (ready; the engine consumes it), then blocks reading one byte, a
// newline, from stdin: the engine writes it once an execution takes this sandbox and its code
// and /code/_sandbox_run.json, {"mode": "script"|"function", "env": {NAME: value}}, are in
// /code; the rest of stdin is the program's. It then goes on as that mode.
import { existsSync, readFileSync, readSync, writeSync } from "node:fs";

let mode = process.argv[2] ?? "script";
process.argv.splice(1, 2, "/code/main.ts");
const SIDE = 4;
let reported = false;

if (mode === "pool") {
  const preload = (process.env.SANDBOX_PRELOAD ?? "").split(",").filter(Boolean);
  delete process.env.SANDBOX_PRELOAD;
  for (const name of preload) {
    // A module that fails to import here fails the same way, with its message, in the caller's code.
    try { await import(name); } catch {}
  }
  writeSync(SIDE, "R");
  const run = readRun();
  mode = run.mode === "function" ? "function" : "script";
  for (const [k, v] of Object.entries(run.env ?? {})) process.env[k] = String(v);
}

// The go byte from fd 0 (one byte, so nothing of the program's stdin after it is consumed),
// then the execution's run file. EOF instead: the engine ended the execution here before its
// go (it starts it cold elsewhere, or the engine is gone), though its code and run file may be
// in /code already: nothing of it may run here, or it would run twice.
function readRun() {
  const one = Buffer.alloc(1);
  const wait = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    try {
      if (readSync(0, one, 0, 1, null) !== 1 || one[0] !== 10) process.exit(75);
      break;
    } catch (e) {
      if (e.code === "EAGAIN") { Atomics.wait(wait, 0, 0, 1); continue; }
      throw e;
    }
  }
  return JSON.parse(readFileSync("/code/_sandbox_run.json", "utf8"));
}

function send(obj) {
  write(JSON.stringify(obj));
}

function write(text) {
  if (reported) return;
  reported = true;
  const data = Buffer.from(text);
  let off = 0;
  while (off < data.length) off += writeSync(SIDE, data, off);
}

function describe(err) {
  if (err instanceof Error) {
    // The caller's frames only: the module loader's and the harness's own are cut.
    const traceback = String(err.stack ?? `${err.name}: ${err.message}`)
      .split("\n")
      .filter((l) => !/^\s+at .*(node:internal\/modules\/|_sandbox_harness\.mjs)/.test(l))
      .join("\n");
    const at = /\/code\/main\.ts:(\d+):(\d+)/.exec(traceback);
    const e = { type: err.name || err.constructor?.name || "Error", message: String(err.message), traceback };
    if (at) Object.assign(e, { line: Number(at[1]), column: Number(at[2]) });
    return e;
  }
  let message;
  try { message = typeof err === "string" ? err : JSON.stringify(err) ?? String(err); } catch { message = String(err); }
  return { type: "ThrownValue", message: `a non-Error value was thrown: ${message}`, traceback: `Uncaught ${message}` };
}

function fail(err, type) {
  const e = describe(err);
  if (type) e.type = type;
  try { writeSync(2, `${e.traceback}\n`); } catch {}
  try { send({ error: e }); } catch {}
  process.exit(1);
}

process.on("uncaughtException", (err) => fail(err));
process.on("unhandledRejection", (reason) => fail(reason));

class ReturnValueNotSerializable extends TypeError {}

const wrapper = {};
function replacer(key, value) {
  const where = this === wrapper ? "the return value" : `key ${JSON.stringify(key)}`;
  if (typeof value === "number" && !Number.isFinite(value)) {
    throw new ReturnValueNotSerializable(`${where} is ${value}, which JSON cannot represent; return null or a string instead`);
  }
  if (typeof value === "bigint") {
    throw new ReturnValueNotSerializable(`${where} is a BigInt, which JSON cannot represent; convert it with Number() or String()`);
  }
  if (value instanceof Map || value instanceof Set) {
    const how = value instanceof Map ? "Object.fromEntries(map)" : "[...set]";
    throw new ReturnValueNotSerializable(`${where} is a ${value.constructor.name}, which JSON would turn into {}; convert it with ${how}`);
  }
  return value;
}

let mod;
try {
  mod = await import("/code/main.mjs");
} catch (err) {
  fail(err);
}
if (mode === "function") {
  const fn = typeof mod.default === "function" ? mod.default : typeof mod.main === "function" ? mod.main : null;
  if (!fn) {
    const e = new ReferenceError("the function harness calls the default export (or an export named main) with the input, but the code exports neither as a function");
    e.stack = `ReferenceError: ${e.message}`;
    fail(e);
  }
  const input = existsSync("/code/input.json") ? JSON.parse(readFileSync("/code/input.json", "utf8")) : null;
  let value;
  try {
    value = await fn(input);
  } catch (err) {
    fail(err);
  }
  let text;
  try {
    wrapper.returnData = value === undefined ? null : value;
    text = JSON.stringify(wrapper, replacer);
  } catch (err) {
    if (err instanceof ReturnValueNotSerializable) {
      err.stack = `ReturnValueNotSerializable: ${err.message}`;
      fail(err, "ReturnValueNotSerializable");
    }
    // A cycle: JSON.stringify's own TypeError says where.
    err.stack = `ReturnValueNotSerializable: ${err.message}`;
    fail(err, "ReturnValueNotSerializable");
  }
  // Sent when the process exits, not now: a timer or a rejection that fails after main returned
  // still ends the run as an error, and then its report, not this value, is sent.
  process.on("exit", () => write(text));
}

// Once the last 'exit' listener has run, what is left of a natural exit (freeing the V8 heap,
// joining the platform's threads: ~1 ms) is nothing the program can observe: end there, with the
// same code. Only when this is the last listener (one added later, by a timer, runs as usual).
process.on("exit", function last(code) {
  const listeners = process.listeners("exit");
  if (listeners[listeners.length - 1] === last) process.reallyExit(code);
});
