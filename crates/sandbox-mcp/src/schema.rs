//! The tools' contracts: argument types (deserialized from `tools/call`) and the shapes of
//! `structuredContent`, each with a JSON Schema (draft 2020-12, schemars) a model can act on.
//!
//! The output types describe what [`crate::render`] writes; they are never built, only
//! described (the value itself is the HTTP result object, adapted as documented on
//! [`ExecuteOutput`]). A unit test checks that every field a result can carry is described.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `sandbox_execute_code`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteArgs {
    /// The program's complete source code. Python runs as a script (`python3 main.py`);
    /// TypeScript runs as an ES module on Node.js (top-level await, Node built-ins, type
    /// annotations stripped). Print results to stdout; write files to the working directory
    /// (/workspace) to return them (PNG/JPEG files come back as images).
    pub code: String,
    /// Language of `code`: `python` or `typescript`. It must match the profile's language.
    pub language: LanguageArg,
    /// How the code is invoked: `script` (run the file; stdout is the output) or `function`
    /// (call `main(input)` and return its JSON result as `returnData`). Default: the profile's.
    #[serde(default)]
    pub harness: Option<HarnessArg>,
    /// Profile (policy: runtime, limits, network) to run under. Default: `python-default` or
    /// `typescript-default` for the language, else the first profile of that language you may use.
    #[serde(default)]
    pub profile: Option<String>,
    /// Wall-clock timeout in milliseconds (as `timeout` in the HTTP API and the SDKs; 20 s is
    /// 20000), at least 100. Default: the profile's `timeoutMs`; at most its `timeoutMaxMs`. A
    /// program still running then is killed (status `timeout`).
    #[serde(default)]
    #[schemars(range(min = 100))]
    pub timeout: Option<u64>,
    /// The same as `timeout` (its older name; give one of the two).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// Input files written to the working directory before the program starts, by relative
    /// name (e.g. `data.csv`, `in/config.json`; no `..`, no leading `/`). A value is the file's
    /// UTF-8 text, or `{"base64": "..."}` for bytes.
    #[serde(default)]
    pub files: BTreeMap<String, FileArg>,
    /// JSON value passed as `main(input)` with the `function` harness.
    #[serde(default)]
    pub input: Option<serde_json::Value>,
}

/// A language the sandbox runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum LanguageArg {
    /// CPython 3.
    Python,
    /// TypeScript on Node.js.
    Typescript,
}

impl LanguageArg {
    /// The core language.
    pub fn language(self) -> sandbox_core::Language {
        match self {
            Self::Python => sandbox_core::Language::Python,
            Self::Typescript => sandbox_core::Language::Typescript,
        }
    }
}

/// How code is invoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HarnessArg {
    /// Run the file as a program.
    Script,
    /// Call `main(input)`; its return value is `returnData`.
    Function,
}

impl HarnessArg {
    /// The wire name, `script` or `function`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Script => "script",
            Self::Function => "function",
        }
    }
}

/// Content of one input file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum FileArg {
    /// The file's text, written as UTF-8.
    Text(String),
    /// The file's bytes.
    Base64 {
        /// RFC 4648 base64 (standard alphabet, padded) of the bytes.
        base64: String,
    },
}

impl From<FileArg> for sandbox_core::wire::FileContent {
    fn from(f: FileArg) -> Self {
        match f {
            FileArg::Text(t) => Self::Text(t),
            FileArg::Base64 { base64 } => Self::Base64 { base64 },
        }
    }
}

/// Arguments of `sandbox_list_profiles` (none).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListProfilesArgs {}

/// `structuredContent` of `sandbox_execute_code`: the HTTP API's result object
/// (`POST /v1/executions`), except that output files carry a resource `uri` instead of their
/// bytes (the bytes are image or embedded-resource content blocks of the same result when they
/// fit, else read with `resources/read`), and that stdout/stderr past 256 KiB / 128 KiB are cut
/// here (`stdoutOmittedBytes`, `stderrOmittedBytes`; the whole stream is the resource
/// `sandbox://executions/{executionId}/stdout` or `.../stderr`), likewise `returnData` past
/// 128 KiB (`.../return-data`). The whole result stays under 900 KiB.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "describes structuredContent; never built")]
pub struct ExecuteOutput {
    /// Execution id (UUIDv7); empty when the call was refused before an execution was created
    /// (malformed arguments).
    execution_id: String,
    /// `ok`: the program exited 0. `error`: it exited non-zero or died by a signal. `timeout`,
    /// `memory_limit`, `output_limit`: a limit ended it. `rejected`: the sandbox refused the
    /// request and nothing ran (see `error.type`). `internal_error`: the service failed.
    status: StatusOut,
    /// Profile it ran under (as requested when rejected).
    profile: String,
    /// Language it ran as.
    #[serde(skip_serializing_if = "Option::is_none")]
    language: Option<String>,
    /// Captured standard output (UTF-8, invalid bytes as U+FFFD).
    stdout: String,
    /// Captured standard error.
    stderr: String,
    /// Bytes of captured stdout not included in `stdout` here (read the stdout resource).
    #[serde(skip_serializing_if = "Option::is_none")]
    stdout_omitted_bytes: Option<u64>,
    /// Bytes of captured stderr not included in `stderr` here (read the stderr resource).
    #[serde(skip_serializing_if = "Option::is_none")]
    stderr_omitted_bytes: Option<u64>,
    /// Exit code (128+signal when a signal ended the program); absent if it never ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    /// Signal that ended the program, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<i32>,
    /// Name of that signal, e.g. `SIGKILL`.
    #[serde(skip_serializing_if = "Option::is_none")]
    signal_name: Option<String>,
    /// Wall time from receipt to result, in ms.
    duration_ms: u64,
    /// The wall-clock timeout ended it.
    timed_out: bool,
    /// The memory limit ended it.
    oom_killed: bool,
    /// Stdout passed the profile's cap; the rest was discarded by the sandbox.
    stdout_truncated: bool,
    /// Stderr passed the profile's cap.
    stderr_truncated: bool,
    /// New or changed files of the working directory, by relative name.
    files: BTreeMap<String, FileOut>,
    /// Workspace entries not returned, with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    skipped_files: Vec<SkippedOut>,
    /// Processes still alive when the main process ended, killed at teardown.
    killed_at_teardown: u32,
    /// The `function` harness's return value (absent here when over 128 KiB as JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    return_data: Option<serde_json::Value>,
    /// Size of `returnData` as JSON when it was left out for size (read the resource
    /// `sandbox://executions/{executionId}/return-data`).
    #[serde(skip_serializing_if = "Option::is_none")]
    return_data_omitted_bytes: Option<u64>,
    /// CPU time and peak memory.
    resource_usage: UsageOut,
    /// Latency breakdown in ms.
    timing: TimingOut,
    /// Isolation actually enforced (absent when nothing ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    enforcement: Option<EnforcementOut>,
    /// Why it was rejected or failed, or the program's error.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorOut>,
    /// What the program reached and what was refused (allowlist profiles only).
    #[serde(skip_serializing_if = "Option::is_none")]
    network: Option<NetworkOut>,
}

/// The network report of an allowlist profile's run.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "schema only")]
struct NetworkOut {
    /// Connections let through.
    allowed: Vec<AllowedOut>,
    /// Attempts refused (connections, datagrams, DNS questions for names not allowed).
    blocked: Vec<BlockedOut>,
    /// Allowed connections beyond the list's cap, counted only.
    allowed_omitted: u64,
    /// Blocked attempts beyond the list's cap, counted only.
    blocked_omitted: u64,
    /// Most memory the engine's TCP buffers held at once for this run's connections, in bytes.
    #[serde(default)]
    buffer_peak_bytes: u64,
}

/// One allowed connection.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "schema only")]
struct AllowedOut {
    /// The allowed name whose rule let the connection through; absent when it was made by address.
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    /// Destination IP address.
    address: String,
    /// Destination port.
    port: u16,
    /// `tcp`.
    protocol: String,
    /// Bytes sent to the destination.
    bytes_sent: u64,
    /// Bytes received from it.
    bytes_received: u64,
    /// When it was opened (RFC 3339, UTC).
    started_at: String,
    /// How long it lasted, in ms.
    duration_ms: u64,
    /// Why it ended abnormally, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// One refused attempt.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "schema only")]
struct BlockedOut {
    /// The name asked for (DNS questions, connections over the cap); absent on refused connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    host: Option<String>,
    /// Destination IP address.
    address: String,
    /// Destination port, where the protocol has ports.
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<u16>,
    /// `tcp`, `udp`, `icmp`, `dns` or `ip:N`.
    protocol: String,
    /// When (RFC 3339, UTC).
    at: String,
    /// `not_allowed`, `name_not_allowed`, `internal_address`, `protocol_not_allowed` or `too_many_connections`.
    reason: String,
}

/// How an execution ended.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[expect(dead_code, reason = "schema only")]
enum StatusOut {
    Ok,
    Error,
    Timeout,
    MemoryLimit,
    OutputLimit,
    Rejected,
    InternalError,
}

/// One output file.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "schema only")]
struct FileOut {
    /// Size in bytes.
    size: u64,
    /// Lowercase hex SHA-256 of the bytes.
    sha256: String,
    /// MIME type from the extension.
    mime_type: String,
    /// `sandbox://executions/{executionId}/files/{name}`: read it with `resources/read`.
    uri: String,
    /// Whether the bytes are a content block of this result (`image` for PNG/JPEG, else an
    /// embedded resource); false when they did not fit the result's size budget.
    inline: bool,
}

/// A workspace entry not returned.
#[derive(JsonSchema)]
#[expect(dead_code, reason = "schema only")]
struct SkippedOut {
    /// Relative name.
    name: String,
    /// `symlink`, `not_regular_file`, `too_large`, `count_cap`, `bytes_cap` or `non_utf8_name`.
    reason: String,
    /// Size in bytes, where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
}

/// Resources used.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "schema only")]
struct UsageOut {
    /// CPU time of every process, in ms.
    cpu_time_ms: u64,
    /// Peak memory of the sandbox, in bytes.
    peak_memory_bytes: u64,
}

/// Where the wall time went, in ms.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "schema only")]
struct TimingOut {
    /// Waiting for an execution slot.
    queue_ms: u64,
    /// Set-up up to the program's start.
    setup_ms: u64,
    /// The program's run.
    run_ms: u64,
    /// Collection and teardown.
    collect_ms: u64,
    /// Started warm (forked from a template, or in a pooled sandbox) rather than cold.
    warm: bool,
    /// How a warm run started: `template` or `pool`; absent when cold.
    #[serde(skip_serializing_if = "Option::is_none")]
    warm_start: Option<WarmStartOut>,
}

/// How a warm run started.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[expect(dead_code, reason = "schema only")]
enum WarmStartOut {
    /// Forked from a template.
    Template,
    /// A pre-started pooled sandbox.
    Pool,
}

/// Isolation enforced.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "schema only")]
struct EnforcementOut {
    /// `v1` or `v2`.
    cgroup: String,
    /// Landlock ABI enforced.
    landlock_abi: u32,
    /// Whether the seccomp filter was installed.
    seccomp: bool,
    /// Network policy: `none` (an empty network namespace) or `allowlist` (the engine's filtered network).
    network: String,
}

/// A structured error.
#[derive(JsonSchema)]
#[expect(dead_code, reason = "schema only")]
struct ErrorOut {
    /// For refusals and service failures the stable error code (`profile_not_found`,
    /// `invalid_file_name`, `timeout_too_large`, `forbidden_profile`, `queue_full`,
    /// `invalid_request`, ...); for programs the exception type (e.g. `SyntaxError`).
    #[serde(rename = "type")]
    kind: String,
    /// What went wrong.
    message: String,
    /// The argument at fault, e.g. `files["../x"]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<String>,
    /// Line in the code (1-based).
    #[serde(skip_serializing_if = "Option::is_none")]
    line: Option<u32>,
    /// Column in the code (1-based).
    #[serde(skip_serializing_if = "Option::is_none")]
    column: Option<u32>,
    /// Traceback text.
    #[serde(skip_serializing_if = "Option::is_none")]
    traceback: Option<String>,
}

/// `structuredContent` of `sandbox_list_profiles`.
#[derive(JsonSchema)]
#[expect(dead_code, reason = "schema only")]
pub struct ProfilesOutput {
    /// The profiles the caller may use.
    profiles: Vec<ProfileOut>,
}

/// A profile as a caller sees it (the HTTP API's `GET /v1/profiles` item plus `libraries`).
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "schema only")]
struct ProfileOut {
    /// Name to pass as `profile`.
    name: String,
    /// `python` or `typescript`.
    language: String,
    /// One line for humans and models.
    description: String,
    /// Libraries importable beyond the standard library, pinned (`numpy==2.4.6`,
    /// `papaparse@5.7.1`); empty: the standard library only.
    libraries: Vec<String>,
    /// The package environment the profile runs in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    environment: Option<String>,
    /// Default harness.
    harness: String,
    /// Harnesses available.
    harnesses: Vec<String>,
    /// Memory cap in bytes.
    memory_max_bytes: u64,
    /// CPU cap in cores.
    cpu_max: f64,
    /// Most processes and threads.
    pids_max: u32,
    /// Default timeout in ms.
    timeout_ms: u64,
    /// Largest `timeout_ms` a call may ask for.
    timeout_max_ms: u64,
    /// Size of /workspace in bytes.
    workspace_max_bytes: u64,
    /// Size of /tmp in bytes.
    tmp_max_bytes: u64,
    /// Stdout cap in bytes.
    stdout_max_bytes: u64,
    /// Stderr cap in bytes.
    stderr_max_bytes: u64,
    /// Most output files returned.
    files_max_count: u32,
    /// Most bytes of output files returned.
    files_max_bytes: u64,
    /// Network policy: `none` (no network at all) or `allowlist` (only the profile's listed endpoints).
    network: String,
    /// Extra directories inside the sandbox.
    mounts: Vec<MountOut>,
}

/// An extra directory.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[expect(dead_code, reason = "schema only")]
struct MountOut {
    /// Path inside the sandbox.
    path: String,
    /// Whether it is read-only.
    read_only: bool,
}
