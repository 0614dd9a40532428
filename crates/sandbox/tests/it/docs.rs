//! The READMEs are executed: every fenced block of README.md and the SDK READMEs carries a
//! `<!-- doc-test: KIND -->` marker on the line before it saying how it is checked, and this test
//! checks it so:
//!
//! - `toml`: parsed by the real binary's config loader (`sandbox --config BLOCK profiles list`);
//! - `sh`: every line that calls `sandbox` runs through the real binary (with the test
//!   configuration and a fresh data directory, in a scratch directory holding the files the
//!   examples name) and exits 0, or with a code its trailing comment documents (`exit 1: ...`);
//! - `http`: a block that starts `sandbox serve` and talks to it: the test starts the server
//!   itself (on a free port, with the test configuration), runs every other line (`curl`,
//!   `sandbox run --server`) against it with `localhost:8080` rewritten to its address, and
//!   checks each exits 0 and that no answer is an error (`"status":"rejected"`, a problem+json);
//! - `json`: illustrative output; must be JSON (a fragment `"key": value` is wrapped in braces);
//! - `sdk-ts` / `sdk-py`: run against a real `sandbox serve` by the SDK suites
//!   (clients/typescript/test/readme.test.ts, clients/python/tests/test_readme.py);
//! - `skip: REASON`: not runnable offline in seconds (installs, builds, VMs); the reason is required.
//!
//! A block without a marker, or with an unknown one, fails the test.

use super::*;

const READMES: &[&str] = &["README.md", "clients/typescript/README.md", "clients/python/README.md"];

/// A fenced block: file, line of its opening fence, marker, text.
struct Block {
    at: String,
    marker: String,
    text: String,
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The fenced blocks of `file`, each with the `<!-- doc-test: ... -->` marker above it ("" if none).
fn blocks(file: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(repo().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].starts_with("```") {
            let marker = (i > 0)
                .then(|| lines[i - 1].trim().strip_prefix("<!-- doc-test:").and_then(|m| m.strip_suffix("-->")))
                .flatten()
                .map_or(String::new(), |m| m.trim().to_owned());
            let end = (i + 1..lines.len()).find(|&j| lines[j].starts_with("```")).unwrap_or_else(|| panic!("{file}:{}: unclosed fence", i + 1));
            out.push(Block { at: format!("{file}:{}", i + 1), marker, text: lines[i + 1..end].join("\n") + "\n" });
            i = end + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// A scratch directory with the files the shell examples name, and the `sandbox` function.
fn shell_prelude(dir: &Path) -> String {
    std::fs::write(dir.join("analysis.py"), "print(open('data.csv').read().upper(), end='')\n").unwrap();
    std::fs::write(dir.join("data.csv"), "a,b\n1,2\n").unwrap();
    // Standard input of every command: an MCP client's first messages (for `sandbox mcp`; the
    // other commands do not read it).
    let mcp = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"docs","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    ];
    std::fs::write(dir.join("stdin.jsonl"), mcp.join("\n") + "\n").unwrap();
    let e = env();
    format!(
        "cd {:?}\nsandbox() {{ {:?} --config {:?} --data-dir {:?} \"$@\" <stdin.jsonl; }}\n",
        dir.display().to_string(),
        bin(),
        e.config.display().to_string(),
        dir.join("data").display().to_string()
    )
}

/// The exit codes a shell line's trailing comment allows besides 0 (`exit 1: ..., 3: ...`).
fn documented_exits(line: &str) -> Vec<i32> {
    let Some((_, comment)) = line.split_once(" # ") else { return vec![0] };
    let Some((_, list)) = comment.split_once("exit ") else { return vec![0] };
    let mut codes = vec![0];
    for part in list.split(", ") {
        if let Some(n) = part.split(':').next().and_then(|n| n.trim().parse().ok()) {
            codes.push(n);
        }
    }
    codes
}

fn check_toml(b: &Block, scratch: &Path) {
    let file = scratch.join("block.toml");
    std::fs::write(&file, format!("{}{}", runtime_toml(), b.text)).unwrap();
    let out = Command::new(bin()).arg("--config").arg(&file).arg("--data-dir").arg(scratch.join("data")).args(["profiles", "list"]).output().unwrap();
    assert!(out.status.success(), "{}: the config loader refuses this block: {}", b.at, String::from_utf8_lossy(&out.stderr));
}

fn check_json(b: &Block) {
    let text = b.text.trim();
    let text = if text.starts_with('"') { format!("{{{text}}}") } else { text.to_owned() };
    // `…` stands for an elided value in the examples.
    let text = text.replace("\"…\"", "\"x\"");
    if let Err(e) = serde_json::from_str::<Value>(&text) {
        panic!("{}: not JSON ({e}):\n{text}", b.at);
    }
}

fn check_sh(b: &Block, scratch: &Path) {
    let prelude = shell_prelude(scratch);
    let mut ran = 0;
    for line in b.text.lines().filter(|l| l.trim_start().starts_with("sandbox ")) {
        let command = line.split(" # ").next().unwrap().trim();
        let out = Command::new("bash").args(["-c", &format!("{prelude}{command}")]).output().unwrap();
        let code = out.status.code().unwrap_or(-1);
        assert!(
            documented_exits(line).contains(&code),
            "{}: `{command}` exited {code}\nstdout: {}\nstderr: {}",
            b.at,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ran += 1;
    }
    assert!(ran > 0, "{}: marked `sh` but has no `sandbox` command; mark it `skip: REASON`", b.at);
}

fn check_http(b: &Block, scratch: &Path) {
    let server = super::http::Server::start("");
    let addr = server.url.trim_start_matches("http://").to_owned();
    let prelude = shell_prelude(scratch);
    // Commands continue over lines ending in a backslash.
    let text = b.text.replace("\\\n", " ");
    let mut ran = 0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("sandbox serve")) {
        let command = line.split(" # ").next().unwrap().trim().replace("localhost:8080", &addr).replace("127.0.0.1:8080", &addr);
        let out = Command::new("bash").args(["-c", &format!("{prelude}{command}")]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: `{command}` exited {:?}\nstdout: {stdout}\nstderr: {}",
            b.at,
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!stdout.contains("\"status\":\"rejected\"") && !stdout.contains("\"type\":\"https://"), "{}: `{command}` was refused: {stdout}", b.at);
        if command.starts_with("curl") {
            assert!(stdout.contains("\"status\":\"ok\""), "{}: `{command}` did not run to ok: {stdout}", b.at);
        }
        ran += 1;
    }
    assert!(ran > 0, "{}: marked `http` but has nothing to run against the server", b.at);
}

/// Every block of the READMEs is checked as its marker says; an unmarked block fails.
#[test]
fn every_readme_block_is_executed_or_says_why_not() {
    let scratch = tempfile::Builder::new().prefix("docs-").tempdir_in(&env().dir).unwrap();
    std::fs::set_permissions(scratch.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for file in READMES {
        for b in blocks(file) {
            let kind = b.marker.split(':').next().unwrap_or("").trim().to_owned();
            match kind.as_str() {
                "toml" => check_toml(&b, scratch.path()),
                "sh" => check_sh(&b, scratch.path()),
                "http" => check_http(&b, scratch.path()),
                "json" => check_json(&b),
                "sdk-ts" | "sdk-py" => {}
                "skip" => assert!(b.marker.len() > "skip: ".len() + 10, "{}: `skip` needs a reason", b.at),
                "" => panic!("{}: a block with no `<!-- doc-test: KIND -->` marker on the line above (see tests/it/docs.rs)", b.at),
                other => panic!("{}: unknown doc-test kind {other:?}", b.at),
            }
            *counts.entry(kind).or_default() += 1;
        }
    }
    // The SDK suites find their blocks by these markers: make sure there are some to find.
    assert!(counts.get("sdk-ts").is_some_and(|n| *n >= 2) && counts.get("sdk-py").is_some_and(|n| *n >= 3), "{counts:?}");
    assert!(counts.get("toml").is_some_and(|n| *n >= 4) && counts.get("sh").is_some_and(|n| *n >= 1), "{counts:?}");
}
