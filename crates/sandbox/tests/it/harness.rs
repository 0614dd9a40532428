//! The harnesses: `function` returns `main(input)`'s value as `returnData` on the side channel
//! (fd 4), never parsed from stdout; uncaught errors come back structured, with the caller's
//! line numbers, from both harnesses and both languages.

use super::*;

#[test]
fn python_function_returns_data_and_prints_are_harmless() {
    let code = "import sys\nprint('{\"returnData\": \"forged\"}')\nprint('log', file=sys.stderr)\n\
                def main(inp):\n    return {'sum': sum(inp['xs']), 'names': ('a', 'b'), 'none': None, 'n': 3}\n";
    let r = run("python-default", code, &["--harness", "function", "--input", r#"{"xs": [1, 2, 3.5]}"#]);
    assert_eq!(r.status(), "ok", "{r:?}");
    assert_eq!(r.json["returnData"], serde_json::json!({"sum": 6.5, "names": ["a", "b"], "none": null, "n": 3}), "{r:?}");
    assert_eq!(r.stdout(), "{\"returnData\": \"forged\"}\n", "stdout is the program's, untouched: {r:?}");
}

#[test]
fn python_async_main_and_no_input() {
    let r = run("python-default", "import asyncio\nasync def main(inp):\n    await asyncio.sleep(0)\n    return [inp]\n", &["--harness", "function"]);
    assert_eq!((r.status(), &r.json["returnData"]), ("ok", &serde_json::json!([null])), "{r:?}");
}

#[test]
fn typescript_function_returns_data() {
    let code = "console.log(JSON.stringify({returnData: 'forged'}));\n\
                export default async function main(input: { xs: number[] }) {\n  \
                  await new Promise((r) => setTimeout(r, 1));\n  \
                  return { sum: input.xs.reduce((a, b) => a + b, 0), when: new Date(0) };\n}\n";
    let r = run("typescript-default", code, &["--harness", "function", "--input", r#"{"xs": [1, 2, 3.5]}"#]);
    assert_eq!(r.status(), "ok", "{r:?}");
    assert_eq!(r.json["returnData"], serde_json::json!({"sum": 6.5, "when": "1970-01-01T00:00:00.000Z"}), "{r:?}");
    assert!(r.stdout().contains("forged"), "{r:?}");
}

#[test]
fn unserializable_return_values_are_clear_errors() {
    for (profile, code, needle) in [
        ("python-default", "def main(i):\n    return {'x': float('nan')}\n", "return value['x'] is nan"),
        ("python-default", "def main(i):\n    return {1.5: 2}\n", "key 1.5 of type float"),
        ("python-default", "def main(i):\n    return object()\n", "return value is a object"),
        ("python-default", "def main(i):\n    d = {}\n    d['self'] = d\n    return d\n", "contains itself (a cycle)"),
        ("python-default", "def main(i):\n    return 10 ** 5000\n", "cannot be written as JSON"),
        ("typescript-default", "export default () => ({ m: new Map([[1, 2]]) })", "key \"m\" is a Map"),
        ("typescript-default", "export default () => 10n", "the return value is a BigInt"),
        ("typescript-default", "export default () => { const a: any = {}; a.self = a; return a; }", "circular"),
    ] {
        let r = run(profile, code, &["--harness", "function"]);
        assert_eq!(r.status(), "error", "{r:?}");
        assert_eq!(r.json["error"]["type"], "ReturnValueNotSerializable", "{r:?}");
        assert!(r.json["error"]["message"].as_str().unwrap().contains(needle), "{needle}: {r:?}");
        assert!(r.json.get("returnData").is_none(), "{r:?}");
    }
}

#[test]
fn an_exception_that_cannot_print_itself_is_still_reported() {
    let code = "class Odd(Exception):\n    def __str__(self):\n        raise RuntimeError('no')\n\nraise Odd()\n";
    let r = run("python-default", code, &[]);
    assert_eq!((r.status(), r.json["error"]["type"].as_str(), r.json["error"]["line"].as_u64()), ("error", Some("Odd"), Some(5)), "{r:?}");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("unprintable"), "{r:?}");
}

#[test]
fn missing_main_is_named() {
    let r = run("python-default", "x = 1\n", &["--harness", "function"]);
    assert_eq!((r.status(), r.json["error"]["type"].as_str()), ("error", Some("NameError")), "{r:?}");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("no function named main"), "{r:?}");
    let r = run("typescript-default", "export const x = 1;\n", &["--harness", "function"]);
    assert_eq!((r.status(), r.json["error"]["type"].as_str()), ("error", Some("ReferenceError")), "{r:?}");
    assert!(r.json["error"]["message"].as_str().unwrap().contains("default export"), "{r:?}");
}

#[test]
fn python_exception_points_at_the_callers_line() {
    for harness in ["script", "function"] {
        let code = "import json\n\ndef helper(d):\n    return d['missing']\n\ndef main(inp):\n    return helper({})\n\n\
                    if __name__ == '__main__':\n    main(None)\n";
        let r = run("python-default", code, &["--harness", harness]);
        assert_eq!(r.status(), "error", "{r:?}");
        let e = &r.json["error"];
        assert_eq!((e["type"].as_str(), e["message"].as_str(), e["line"].as_u64()), (Some("KeyError"), Some("'missing'"), Some(4)), "{r:?}");
        let tb = e["traceback"].as_str().unwrap();
        assert!(tb.contains("File \"/code/main.py\", line 4, in helper"), "{tb}");
        assert!(!tb.contains("_sandbox_harness"), "the harness's frames are cut: {tb}");
        assert!(r.stderr_of_program().contains("KeyError: 'missing'"), "stderr still shows it: {r:?}");
    }
}

#[test]
fn a_typescript_error_after_main_returned_is_reported_not_the_value() {
    for code in [
        "export default function main(i: unknown) {\n  setTimeout(() => { throw new Error('late'); }, 20);\n  return 'early';\n}\n",
        "export default function main(i: unknown) {\n  Promise.reject(new TypeError('rejected'));\n  return 5;\n}\n",
    ] {
        let r = run("typescript-default", code, &["--harness", "function"]);
        assert_eq!(r.status(), "error", "{r:?}");
        assert!(matches!(r.json["error"]["type"].as_str(), Some("Error" | "TypeError")), "{r:?}");
        assert_eq!(r.json["error"]["line"], 2, "{r:?}");
        assert!(r.json.get("returnData").is_none(), "{r:?}");
    }
}

#[test]
fn returning_none_is_null_not_absent() {
    let r = run("python-default", "def main(i):\n    return None\n", &["--harness", "function"]);
    assert_eq!((r.status(), r.json.get("returnData")), ("ok", Some(&Value::Null)), "{r:?}");
    let r = run("typescript-default", "export default () => null;\n", &["--harness", "function"]);
    assert_eq!((r.status(), r.json.get("returnData")), ("ok", Some(&Value::Null)), "{r:?}");
    let r = run("python-default", "import sys\ndef main(i):\n    sys.exit(0)\n", &["--harness", "function"]);
    assert_eq!((r.status(), r.json.get("returnData")), ("ok", None), "exited without returning: {r:?}");
}

#[test]
fn the_cli_prints_the_return_value_on_its_own_line() {
    let out = sandbox(&["run", "--harness", "function", "-c", "def main(i):\n    print('x', end='')\n    return [1, 2]\n"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "x\n[\n  1,\n  2\n]\n", "{out:?}");
}

#[test]
fn after_an_uncaught_exception_atexit_handlers_still_run() {
    let r = run("python-default", "import atexit\natexit.register(lambda: print('cleanup ran'))\nraise ValueError('x')\n", &[]);
    assert_eq!((r.status(), r.stdout(), r.json["error"]["type"].as_str()), ("error", "cleanup ran\n", Some("ValueError")), "{r:?}");
    assert_eq!(r.status, 1);
}

/// A warm child ends with `_exit` after its own finalization (harness_lib.py `finalize`): what a
/// program leaves to the interpreter's exit must still happen, as it does cold, in CPython's
/// order: a `__del__` of an object only a module kept runs while that module's globals are
/// intact (here `os` and `f`; warm runs used to hand it None for both), and a file left open at
/// module level is flushed.
#[test]
fn objects_left_at_exit_are_finalized_as_a_normal_exit_does() {
    let code = "f = open('left-open.txt', 'w')\nf.write('flushed at exit')\nimport os\n\
                class Noisy:\n    def __del__(self):\n        print(os.path.basename('/x/finalized'), type(f).__name__)\nkeep = Noisy()\n\
                import json\njson.kept = open('in-a-module.txt', 'w')\njson.kept.write('also flushed')\n";
    let r = run("python-default", code, &[]);
    assert_eq!((r.status(), r.stdout()), ("ok", "finalized TextIOWrapper\n"), "{r:?}");
    assert_eq!(r.file_bytes("left-open.txt").as_deref(), Some(&b"flushed at exit"[..]), "{r:?}");
    assert_eq!(r.file_bytes("in-a-module.txt").as_deref(), Some(&b"also flushed"[..]), "{r:?}");
}

/// The exit statuses and the stderr of an ending program are the interpreter's in every mode
/// (a warm run emulates its exit; a differential review found each of these differing): a
/// `sys.exit` past a C long is 255, not its low byte (a failure read as success); a stdout whose
/// flush fails at exit is reported and makes the status 120 (`Py_RunMain`); `sys.exit("bye")`
/// with `sys.stderr` None still prints on fd 2; an uncaught exception with `sys.stderr` None
/// prints nothing (the harness's own traceback went to stdout) and is still reported.
#[test]
fn exit_statuses_and_stderr_at_exit_are_the_interpreters() {
    let r = run("python-default", "import sys\nsys.exit(2**64)", &[]);
    assert_eq!((r.status(), r.json["exitCode"].as_i64()), ("error", Some(255)), "{r:?}");
    let r = run("python-default", "import sys\nsys.stdout = open('/dev/full', 'w')\nprint('x')", &[]);
    assert_eq!(r.json["exitCode"].as_i64(), Some(120), "{r:?}");
    let stderr = r.stderr_of_program();
    assert!(
        stderr.contains("Exception ignored in: <_io.TextIOWrapper name='/dev/full'") && stderr.contains("OSError: [Errno 28] No space left on device"),
        "{r:?}"
    );
    let r = run("python-default", "import sys\nsys.stderr = None\nsys.exit('bye')", &[]);
    assert_eq!((r.json["exitCode"].as_i64(), r.stderr_of_program()), (Some(1), "bye\n"), "{r:?}");
    let r = run("python-default", "import sys\nsys.stderr = None\nraise ValueError('x')", &[]);
    assert_eq!((r.json["exitCode"].as_i64(), r.stdout(), r.stderr_of_program()), (Some(1), "", ""), "{r:?}");
    assert_eq!(r.json["error"]["type"], "ValueError", "{r:?}");
}

/// What the program's module and its standard streams are is the interpreter's in every mode:
/// `__builtins__` is the builtins module (a template's child had a dict), stdin over a pipe is
/// not seekable (a template's child had its template's answer cached, and a library that seeks
/// failed with ESPIPE), and `tempfile` picks its directory from the run's TMPDIR (a template
/// had picked /tmp while warming up, and the file was lost as an output).
#[test]
fn the_programs_module_stdin_and_tempdir_are_the_interpreters() {
    let input = scratch_file("input.txt", b"twelve bytes");
    let code = "import sys, tempfile\nprint(__builtins__.len([1, 2]), sys.stdin.seekable(), sys.stdin.buffer.seekable(), len(sys.stdin.read()))\n\
                fd, path = tempfile.mkstemp(suffix='.txt')\nprint(path.startswith('/workspace/'))";
    let r = run("python-default", code, &["--stdin", input.to_str().unwrap(), "--env", "TMPDIR=/workspace"]);
    assert_eq!((r.status(), r.stdout()), ("ok", "2 False False 12\nTrue\n"), "{r:?}");
}

/// The program's modules are finalized in the interpreter's order in every mode: by the time
/// an object of `__main__` is finalized, `sys.argv` and `sys.meta_path` are None (an import
/// fails), `sys.stdout` is the real stdout again (the program's file got only its own line),
/// and builtins the program added are gone.
#[test]
fn modules_are_finalized_in_the_interpreters_order() {
    let code = "import sys, builtins\nbuiltins.added = 1\nsys.stdout = open('out.txt', 'w')\nprint('to the file')\n\
                class D:\n    def __del__(self):\n        print('del', sys.argv, 'added' in dir(builtins))\n        \
                try:\n            import colorsys\n        except ImportError as e:\n            print('import:', e)\nd = D()\n";
    let r = run("python-default", code, &[]);
    assert_eq!((r.status(), r.stdout()), ("ok", "del None False\nimport: sys.meta_path is None, Python is likely shutting down\n"), "{r:?}");
    assert_eq!(r.file_bytes("out.txt").as_deref(), Some(&b"to the file\n"[..]), "{r:?}");
}

/// Input files import from the workspace, after the standard library and the environment: an
/// input named json.py does not replace the json module. (A warm child keeps the template's
/// import caches for the read-only directories and gets fresh ones for /code and /workspace.)
#[test]
fn input_modules_import_from_the_workspace_after_the_standard_library() {
    let helper = scratch_file("helper.py", b"VALUE = 42\n");
    let shadow = scratch_file("json.py", b"raise SystemExit('the input json.py was imported')\n");
    let (helper, shadow) = (format!("helper.py={}", helper.display()), format!("json.py={}", shadow.display()));
    let r = run("python-default", "import helper, json, csv\nprint(helper.VALUE, json.dumps([1]), csv.QUOTE_ALL)", &["--file", &helper, "--file", &shadow]);
    assert_eq!((r.status(), r.stdout()), ("ok", "42 [1] 1\n"), "{r:?}");
}

/// The harness compiles the caller's code without `compile()` (whose first call costs a cold
/// start ~0.5 ms): what the code sees must be what `compile(source, "/code/main.py")` gives.
#[test]
fn python_code_is_compiled_as_its_file_with_its_warnings_and_futures() {
    let code = "from __future__ import annotations\nimport sys, warnings\n\
                def f(x: Undefined) -> None:\n    return (lambda: 0).__code__.co_filename\n\
                class C:\n    def m(self):\n        return sys._getframe().f_code.co_filename\n\
                print(f(1), C().m(), f.__annotations__)\n\
                print(sys.gettrace(), [w for w in warnings.filters if w[0] == 'error'])\n\
                same = 1 is 1\n";
    let r = run("python-default", code, &[]);
    assert_eq!(r.status(), "ok", "{r:?}");
    assert_eq!(r.stdout(), "/code/main.py /code/main.py {'x': 'Undefined', 'return': 'None'}\nNone []\n", "{r:?}");
    // The compiler's warning names the file and line, as `python3 main.py` prints it.
    assert!(r.stderr_of_program().contains("/code/main.py:10: SyntaxWarning"), "{r:?}");
    // Warnings made errors turn that one into a SyntaxError at its line, as compile() does
    // (cold in every mode: the interpreter reads PYTHONWARNINGS as it starts).
    let out = sandbox(&["run", "--json", "--profile", "python-default", "-c", code, "--env", "PYTHONWARNINGS=error"]).output().unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = &r["error"];
    assert_eq!((r["status"].as_str(), e["type"].as_str(), e["line"].as_u64()), (Some("error"), Some("SyntaxError"), Some(10)), "{r:?}");
}

/// The `.pyc` files framed in a harness bytecode cache file (`<data>/bytecode/harness-*.bin`:
/// each an 8-byte little-endian length, then the bytes), and the file's path.
pub fn harness_bytecode(data: &std::path::Path) -> (std::path::PathBuf, Vec<Vec<u8>>) {
    let files: Vec<_> = std::fs::read_dir(data.join("bytecode")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "one cache file: {files:?}");
    let (mut bytes, mut pycs) = (std::fs::read(&files[0]).unwrap(), Vec::new());
    while !bytes.is_empty() {
        let len = usize::try_from(u64::from_le_bytes(bytes[..8].try_into().unwrap())).unwrap();
        pycs.push(bytes[8..8 + len].to_vec());
        bytes.drain(..8 + len);
    }
    (files[0].clone(), pycs)
}

/// Code that runs while the caller's code is compiled (here a GC callback that a sitecustomize
/// registered) is neither taken for the caller's module nor run in its place, and a byte order
/// mark starts the file as `python3 main.py` reads it.
#[test]
fn python_code_compiles_to_its_own_module_whatever_runs_meanwhile() {
    let site = scratch_file("sitecustomize.py", b"import gc\nseen = []\ngc.callbacks.append(lambda phase, info: seen.append(phase))\n");
    let mut code = String::from("\u{feff}import sitecustomize\nbefore = len(sitecustomize.seen)\n");
    for i in 0..3000 {
        code.push_str(&format!("def f{i}(a, b=({i}, 'x', [{i}])):\n    return (a, b, {{'k': [a]}})\n"));
    }
    code.push_str("print(__name__, __file__, f7.__code__.co_filename, before > 0)\n");
    let (site, main) = (format!("sitecustomize.py={}", site.display()), scratch_file("main.py", code.as_bytes()));
    // Cold in every mode: PYTHONPATH is read as the interpreter starts.
    let out = sandbox(&["run", "--json", "--file", &site, "--env", "PYTHONPATH=/workspace", main.to_str().unwrap()]).output().unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((r["status"].as_str(), r["stdout"].as_str()), (Some("ok"), Some("__main__ /code/main.py /code/main.py True\n")), "{r}");
}

/// A cold Python run starts from the harness's bytecode, compiled once by the host's interpreter
/// and kept owner-only in the data directory; bytecode that is not this interpreter's (here its
/// magic number altered) is passed over for the source, in both harnesses.
#[test]
fn python_cold_runs_start_from_the_harness_bytecode_and_fall_back_to_its_source() {
    let data = tempfile::Builder::new().prefix("sandbox-it-bytecode-").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(data.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let cold = |code: &str, extra: &[&str]| -> Value {
        let mut c = Command::new(bin());
        c.arg("--config").arg(&env().config).arg("--data-dir").arg(data.path()).args(["run", "--json", "-c", code]).args(extra);
        let out = c.output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let probe = "import os, sys\nprint(sys.orig_argv[1:3], sys.path[0], sorted(f for f in os.listdir('/code') if f.endswith('.pyc')))\n";
    let r = cold(probe, &[]);
    assert_eq!(r["stdout"], "['-B', '-c'] /code ['_sandbox_harness.pyc']\n", "{r}");
    let (file, pycs) = harness_bytecode(data.path());
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(data.path().join("bytecode")).unwrap().permissions().mode() & 0o777, 0o700);
    // The function harness carries the rest of the harness's bytecode too.
    let r = cold("import os\ndef main(x):\n    return sorted(f for f in os.listdir('/code') if f.endswith('.pyc'))\n", &["--harness", "function"]);
    assert_eq!(r["returnData"], serde_json::json!(["_sandbox_harness.pyc", "_sandbox_harness_lib.pyc"]), "{r}");
    // Another interpreter's bytecode, as far as the magic number says.
    let mut framed = Vec::new();
    for mut pyc in pycs {
        pyc[0] ^= 0x55;
        framed.extend((pyc.len() as u64).to_le_bytes());
        framed.extend(pyc);
    }
    std::fs::write(&file, framed).unwrap();
    let r = cold("import sys\nprint(sys.orig_argv[2])\nraise KeyError(7)\n", &[]);
    assert_eq!((r["stdout"].as_str(), r["error"]["type"].as_str(), r["error"]["line"].as_u64()), (Some("-c\n"), Some("KeyError"), Some(3)), "{r}");
    let r = cold("def main(x):\n    return {'n': 1}\n", &["--harness", "function"]);
    assert_eq!(r["returnData"], serde_json::json!({"n": 1}), "{r}");
}

#[test]
fn python_syntax_error_has_line_and_column() {
    let r = run("python-default", "x = 1\ny = (\nprint(x)\nz = ]\n", &[]);
    let e = &r.json["error"];
    assert_eq!((r.status(), e["type"].as_str()), ("error", Some("SyntaxError")), "{r:?}");
    assert!(e["line"].as_u64().is_some_and(|l| (2..=4).contains(&l)), "{r:?}");
    assert!(e["column"].as_u64().is_some(), "{r:?}");
}

#[test]
fn typescript_throw_points_at_the_callers_line() {
    // Type annotations shift nothing: the source map gives main.ts positions.
    let code = "interface Row { v: number }\nconst rows: Row[] = [];\n\nfunction first(r: Row[]): number {\n  \
                if (r.length === 0) throw new RangeError(`no rows: ${r.length}`);\n  return r[0].v;\n}\n\nfirst(rows);\n";
    for harness in ["script", "function"] {
        let r = run("typescript-default", code, &["--harness", harness]);
        let e = &r.json["error"];
        assert_eq!(r.status(), "error", "{r:?}");
        assert_eq!((e["type"].as_str(), e["message"].as_str(), e["line"].as_u64()), (Some("RangeError"), Some("no rows: 0"), Some(5)), "{r:?}");
        let tb = e["traceback"].as_str().unwrap();
        assert!(tb.contains("/code/main.ts:5:"), "{tb}");
        assert!(!tb.contains("_sandbox_harness"), "{tb}");
    }
    // An error thrown later, from a timer, is reported too.
    let r = run("typescript-default", "setTimeout(() => {\n  null!.x;\n}, 1);\n", &[]);
    assert_eq!((r.status(), r.json["error"]["type"].as_str(), r.json["error"]["line"].as_u64()), ("error", Some("TypeError"), Some(2)), "{r:?}");
}

#[test]
fn sys_exit_and_process_exit_keep_their_codes() {
    let r = run("python-default", "import sys\nsys.exit(7)\n", &[]);
    assert_eq!((r.status(), r.status, r.json.get("error")), ("error", 7, None), "{r:?}");
    let r = run("typescript-default", "process.exit(9)", &[]);
    assert_eq!((r.status(), r.status, r.json.get("error")), ("error", 9, None), "{r:?}");
}

/// The harness ends a TypeScript program once the last 'exit' listener has run: the program's
/// own listeners, added before the harness's last one or after it (a timer), all run, and its
/// exit code stays.
#[test]
fn typescript_exit_listeners_run_and_the_exit_code_stays() {
    let code = "process.exitCode = 4;
                process.on('exit', (c) => console.log('first', c));
                setTimeout(() => process.on('exit', (c) => console.log('late', c)), 1);
";
    let r = run("typescript-default", code, &[]);
    assert_eq!((r.status(), r.status, r.stdout()), ("error", 4, "first 4\nlate 4\n"), "{r:?}");
}

#[test]
fn input_needs_the_function_harness_and_valid_json() {
    let r = run("python-default", "print(1)", &["--input", "{}"]);
    assert_eq!(
        (r.status(), r.json["error"]["type"].as_str(), r.json["error"]["field"].as_str()),
        ("rejected", Some("invalid_request"), Some("input")),
        "{r:?}"
    );
    let out = sandbox(&["run", "--harness", "function", "--input", "{nope", "-c", "def main(i): pass"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--input"), "{out:?}");
}

#[test]
fn return_data_over_the_cap_is_an_error_not_a_hang() {
    // 16 MiB cap by default; 20 MiB of string.
    let r = run("python-default", "def main(i):\n    return 'x' * (20 << 20)\n", &["--harness", "function"]);
    assert_eq!((r.status(), r.json["error"]["type"].as_str()), ("error", Some("ReturnDataTooLarge")), "{r:?}");
}

#[test]
fn a_program_that_forges_the_side_channel_gets_a_protocol_error() {
    let r = run("python-default", "import os\nos.write(4, b'not json')\n", &[]);
    assert_eq!((r.status(), r.json["error"]["type"].as_str()), ("error", Some("HarnessProtocolError")), "{r:?}");
}

/// The keys of a JSON object as the CLI printed them (the test's own `serde_json` keeps order).
fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap_or_else(|| panic!("not an object: {v}")).keys().map(String::as_str).collect()
}

/// Key order is the program's, end to end: `input` reaches `main` in the caller's order and the
/// returned object comes back in the program's order (neither sorted), in both languages.
#[test]
fn json_key_order_is_kept_through_the_cli() {
    let input = r#"{"zeta": 1, "alpha": {"y": 1, "b": 2}, "mid": 3}"#;
    let py = "def main(inp):\n    return {'inputKeys': list(inp), 'nestedKeys': list(inp['alpha']), 'rows': 1, 'completeRows': 2, 'species': 3}\n";
    let r = run("python-default", py, &["--harness", "function", "--input", input]);
    assert_eq!(r.status(), "ok", "{r:?}");
    assert_eq!(r.json["returnData"]["inputKeys"], serde_json::json!(["zeta", "alpha", "mid"]), "{r:?}");
    assert_eq!(r.json["returnData"]["nestedKeys"], serde_json::json!(["y", "b"]), "{r:?}");
    assert_eq!(keys(&r.json["returnData"]), ["inputKeys", "nestedKeys", "rows", "completeRows", "species"], "{r:?}");
    let ts = "export default function main(input: Record<string, unknown>) {\n  \
              return { inputKeys: Object.keys(input), rows: 1, completeRows: 2, species: 3 };\n}\n";
    let r = run("typescript-default", ts, &["--harness", "function", "--input", input]);
    assert_eq!(r.status(), "ok", "{r:?}");
    assert_eq!(r.json["returnData"]["inputKeys"], serde_json::json!(["zeta", "alpha", "mid"]), "{r:?}");
    assert_eq!(keys(&r.json["returnData"]), ["inputKeys", "rows", "completeRows", "species"], "{r:?}");
}

/// A program's own /proc files are its own, in every mode: it reads its environment, memory
/// map and namespaces, as any Linux process reads its own. A warm program never execs, and
/// exec is what had made a program dumpable again after its uid change: warm, /proc/self
/// belonged to root, and `/proc/self/environ` (psutil's `environ()`) failed with EACCES; then
/// it listed the template's starting environment, without the request's variables. Its
/// sandbox's init stays out of its sight.
#[test]
fn a_program_reads_its_own_proc_files_in_every_mode() {
    let code = "import os\nme = os.getuid()\n\
                env = set(filter(None, open('/proc/self/environ', 'rb').read().split(b'\\0')))\n\
                print('environ', env == {f'{k}={v}'.encode() for k, v in os.environ.items()}, b'REQUEST_VAR=from-the-request' in env)\n\
                print('owner', all(os.stat(p).st_uid == me for p in ('/proc/self/environ', '/proc/self/mem', '/proc/self/status')))\n\
                print('ns', os.readlink('/proc/self/ns/pid').startswith('pid:['))\n\
                m = open('/proc/self/mem', 'rb')\n\
                start = int(open('/proc/self/maps').readline().split('-')[0], 16)\n\
                m.seek(start)\nprint('mem', len(m.read(16)))\n\
                print('init', os.path.exists('/proc/1/environ'))";
    // Not while a test of attacks.rs sets a socket core_pattern, under which a forked warm program
    // stays non-dumpable (attacks::a_forked_warm_programs_crash_never_reaches_a_socket_core_pattern).
    let _steady = core_pattern_turn(false);
    let r = run("python-default", code, &["--env", "REQUEST_VAR=from-the-request"]);
    assert_eq!(r.stdout(), "environ True True\nowner True\nns True\nmem 16\ninit False\n", "{r:?}");
}
