//! Wire types: the execution request and result as callers see them (JSON, camelCase),
//! shared by the CLI's `--json`, the HTTP API and MCP.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ErrorCode;

/// A language the service runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// CPython 3 (the host's `python3` by default).
    Python,
    /// TypeScript, transpiled in-process and run on Node.js as an ES module.
    Typescript,
}

impl Language {
    /// Parses `python` / `typescript` (also `py`, `ts`), case-insensitive.
    /// Errors: [`ErrorCode::UnsupportedLanguage`] naming the accepted values.
    pub fn parse(s: &str) -> Result<Self, (ErrorCode, String)> {
        match s.to_ascii_lowercase().as_str() {
            "python" | "py" | "python3" => Ok(Self::Python),
            "typescript" | "ts" => Ok(Self::Typescript),
            _ => Err((ErrorCode::UnsupportedLanguage, format!("unknown language {s:?}; expected \"python\" or \"typescript\""))),
        }
    }

    /// `python` or `typescript`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Python => "python",
            Self::Typescript => "typescript",
        }
    }
}

/// How code is invoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Harness {
    /// Run the file as a program; stdout is the output.
    #[default]
    Script,
    /// Call `main(input)` (Python `def main(input)`, TypeScript default export) and return its
    /// JSON value as `returnData`, carried on a side channel (fd 4), never parsed from stdout.
    Function,
}

impl Harness {
    /// The wire name, `script` or `function`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Script => "script",
            Self::Function => "function",
        }
    }
}

/// Content of one input file: UTF-8 text, or bytes as `{ "base64": "..." }` (RFC 4648 standard alphabet, padded).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(untagged)]
pub enum FileContent {
    /// The file's text, written as UTF-8.
    Text(String),
    /// The file's bytes, base64-encoded.
    Base64 {
        /// RFC 4648 base64 of the bytes.
        base64: String,
    },
}

/// One execution request (DESIGN.md "Interfaces").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecutionRequest {
    /// Name of the profile to run under, e.g. `python-default`. Optional (absent or `""`): the
    /// service picks `<language>-default` when the caller may use it, else the first profile
    /// (by name) of that language the caller may use, `language` being `python` when absent too;
    /// the same rule on every door (HTTP, SDKs, MCP, CLI).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub profile: String,
    /// Language of `code`; defaults to the profile's language and must match it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// The program's source.
    pub code: String,
    /// `script` (default) or `function`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub harness: Option<String>,
    /// Wall-clock timeout in ms (20 s is 20000); defaults to the profile's, may not exceed its
    /// maximum. Below 100 ms it is refused with `invalid_timeout` (almost surely seconds; the
    /// bound is `sandbox_core::admit::MIN_TIMEOUT_MS`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Input files by workspace-relative name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, FileContent>,
    /// Globs selecting which new or changed workspace files come back, e.g. `["*.png", "results/**"]`;
    /// empty means all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    /// Bytes fed to the program's standard input (text, or `{ "base64": ... }`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<FileContent>,
    /// Input value for the `function` harness: any JSON value, passed to `main(input)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub input: Option<serde_json::Value>,
    /// Extra environment variables, added to the profile's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// How an execution ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The program exited with code 0.
    Ok,
    /// The program exited non-zero or was killed by a signal of its own making.
    Error,
    /// The wall-clock timeout ended it.
    Timeout,
    /// The cgroup memory limit (or the runtime's heap limit derived from it) ended it.
    MemoryLimit,
    /// Output passed the profile's cap and the profile stops programs at the cap.
    OutputLimit,
    /// The request was refused before anything ran.
    Rejected,
    /// The service failed (also the value of a result not yet filled in).
    #[default]
    InternalError,
}

impl Status {
    /// The status as it appears on the wire, e.g. `memory_limit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Timeout => "timeout",
            Self::MemoryLimit => "memory_limit",
            Self::OutputLimit => "output_limit",
            Self::Rejected => "rejected",
            Self::InternalError => "internal_error",
        }
    }
}

/// One returned output file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutputFile {
    /// The bytes, RFC 4648 base64.
    pub base64: String,
    /// Size in bytes.
    pub size: u64,
    /// Lowercase hex SHA-256 of the bytes.
    pub sha256: String,
    /// MIME type guessed from the extension, `application/octet-stream` when unknown.
    pub mime_type: String,
}

/// A workspace entry that was not returned, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkippedFile {
    /// Workspace-relative name (lossy UTF-8 if the name was not UTF-8).
    pub name: String,
    /// Why it was not returned.
    pub reason: SkipReason,
    /// Size in bytes, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// On the `list_cap` entry only: how many entries it stands for (those past the list's
    /// 1,000, each skipped for its own reason; its name says the same in words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

/// Why a workspace entry was not returned (`skippedFiles[].reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// A symbolic link (never followed).
    Symlink,
    /// Not a regular file (a device, FIFO or socket).
    NotRegularFile,
    /// A name that is not UTF-8 (listed lossily).
    NonUtf8Name,
    /// A path longer than the service accepts.
    NameTooLong,
    /// Deeper than the walk goes (64 levels).
    TooDeep,
    /// Past the profile's `files_max_count`.
    CountCap,
    /// Past the profile's `files_max_bytes`.
    BytesCap,
    /// Past the most directory entries one collection walks (100,000).
    EntryCap,
    /// Could not be opened or read.
    Unreadable,
    /// Changed while it was read (its size or identity moved).
    ChangedWhileReading,
    /// Stands for the entries past the list's cap (1,000), counted in its `count`.
    ListCap,
}

impl SkipReason {
    /// The wire name, e.g. `count_cap`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Symlink => "symlink",
            Self::NotRegularFile => "not_regular_file",
            Self::NonUtf8Name => "non_utf8_name",
            Self::NameTooLong => "name_too_long",
            Self::TooDeep => "too_deep",
            Self::CountCap => "count_cap",
            Self::BytesCap => "bytes_cap",
            Self::EntryCap => "entry_cap",
            Self::Unreadable => "unreadable",
            Self::ChangedWhileReading => "changed_while_reading",
            Self::ListCap => "list_cap",
        }
    }
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Resources the execution used, read from its cgroup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceUsage {
    /// User plus system CPU time of every process of the execution, in ms.
    pub cpu_time_ms: u64,
    /// Peak memory of the cgroup (anonymous, page cache and tmpfs), in bytes.
    pub peak_memory_bytes: u64,
}

/// Where the wall time went, in ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Timing {
    /// Waiting for admission (0 without a queue).
    pub queue_ms: u64,
    /// Validation, transpiling, workspace, cgroup and container set-up, up to the program's exec.
    pub setup_ms: u64,
    /// From the program's exec to the end of its last process.
    pub run_ms: u64,
    /// Reading output files and resource usage, in ms (the sandbox is torn down after, beside
    /// the audit record's `finish`).
    pub collect_ms: u64,
    /// The program started warm (its interpreter and the environment's preloaded modules were
    /// already loaded) rather than cold: forked from a template, or in a pooled sandbox.
    #[serde(default)]
    pub warm: bool,
    /// How a warm run started; absent for a cold one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_start: Option<WarmStart>,
}

/// How a warm execution started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WarmStart {
    /// Forked from a template (a Python interpreter with the environment's modules imported).
    Template,
    /// In a pre-started single-use sandbox of the profile's pool.
    Pool,
    /// In a child forked from a template and sandboxed before the request, waiting in the
    /// profile's pool (`[warm] pool_size` of a template profile; the process-per-request
    /// "prefork" model of Apache httpd's MPM of that name).
    Prefork,
}

/// A structured error: a rejection, a service failure, or (later) a program's exception.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecError {
    /// For rejections and service failures, the stable error code (`profile_not_found`,
    /// `invalid_file_name`, `timeout_too_large`, `forbidden_profile`, `queue_full`,
    /// `invalid_request`, ...); for programs, the exception type (e.g. `SyntaxError`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Human-readable message.
    pub message: String,
    /// The request field at fault, e.g. `files["../x"]`, where one applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Line and column in the caller's code, where one applies (1-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// Column in the caller's code (1-based), with `line`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
    /// Traceback text, where one applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceback: Option<String>,
}

impl ExecError {
    /// An error of `kind` (an [`ErrorCode`] string or an exception type) with `message` and no location.
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self { kind: kind.into(), message: message.into(), field: None, line: None, column: None, traceback: None }
    }
}

/// What isolation was actually enforced for this execution (never silently weaker).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Enforcement {
    /// The cgroup hierarchy the limits were set in.
    pub cgroup: CgroupVersion,
    /// The landlock ABI version enforced.
    pub landlock_abi: u32,
    /// Whether the seccomp filter was installed.
    pub seccomp: bool,
    /// The network policy enforced.
    pub network: NetworkMode,
}

/// A cgroup hierarchy version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    /// cgroup v1 (or a hybrid host's v1 controllers).
    V1,
    /// The unified cgroup v2 hierarchy.
    #[default]
    V2,
}

/// A network policy as enforced: what a profile's `network` asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// An empty network namespace (loopback only).
    #[default]
    None,
    /// The engine's filtered network: the profile's listed endpoints only.
    Allowlist,
}

impl NetworkMode {
    /// `none` or `allowlist`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Allowlist => "allowlist",
        }
    }
}

impl std::fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of one execution (DESIGN.md "Interfaces").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionResult {
    /// Unique id (UUIDv7, time-ordered); empty when the request was refused before an
    /// execution was created (MCP arguments that are no request).
    pub execution_id: String,
    /// How it ended.
    pub status: Status,
    /// Profile it ran under (as requested when rejected).
    pub profile: String,
    /// Language it ran as, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<Language>,
    /// Captured standard output, lossy UTF-8 (invalid bytes become U+FFFD).
    pub stdout: String,
    /// Captured standard error, lossy UTF-8.
    pub stderr: String,
    /// The exact stdout bytes, base64, present only when stdout was not valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_base64: Option<String>,
    /// The exact stderr bytes, base64, present only when stderr was not valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_base64: Option<String>,
    /// Exit code of the program (128+signal when a signal ended it); absent if it never ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Number of the signal that ended the program, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Name of that signal, e.g. `SIGKILL`; a real-time signal as `SIGRTMIN` or `SIGRTMIN+k`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal_name: Option<String>,
    /// Wall time from receipt to result, in ms.
    pub duration_ms: u64,
    /// The wall-clock timeout ended it.
    pub timed_out: bool,
    /// The cgroup OOM killer (or the runtime's heap limit) ended it.
    pub oom_killed: bool,
    /// Stdout passed the cap; the rest was discarded.
    pub stdout_truncated: bool,
    /// Stderr passed the cap; the rest was discarded.
    pub stderr_truncated: bool,
    /// New or changed workspace files, by workspace-relative name.
    pub files: BTreeMap<String, OutputFile>,
    /// Workspace entries not returned, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_files: Vec<SkippedFile>,
    /// Processes still alive when the program's main process ended, killed at teardown.
    pub killed_at_teardown: u32,
    /// The `function` harness's return value: any JSON value (`null` when `main` returned
    /// None/null; absent when the harness is `script` or nothing was returned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub return_data: Option<serde_json::Value>,
    /// CPU time and peak memory.
    pub resource_usage: ResourceUsage,
    /// Latency breakdown.
    pub timing: Timing,
    /// Connections allowed and attempts blocked (allowlist profiles only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::network::NetworkReport>,
    /// Isolation actually enforced (absent for rejected requests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<Enforcement>,
    /// Why it was rejected or failed, or the program's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ExecError>,
}

/// An HTTP error body, `application/problem+json` (RFC 9457), with the stable [`ErrorCode`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// A URI naming the problem type: `urn:sandbox:error:<code>`.
    #[serde(rename = "type")]
    pub type_uri: String,
    /// Short summary of the problem type.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// The stable error code, e.g. `invalid_file_name`.
    pub code: ErrorCode,
    /// What went wrong, for humans.
    pub detail: String,
    /// The request field at fault, e.g. `files["../x"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The execution id, when one was assigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
}

/// What a caller may know of a profile: no host paths, no secrets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileInfo {
    /// Profile name.
    pub name: String,
    /// Language it runs.
    pub language: Language,
    /// One line for humans and models.
    pub description: String,
    /// Default harness.
    pub harness: Harness,
    /// Harnesses available.
    pub harnesses: Vec<Harness>,
    /// Memory cap in bytes.
    pub memory_max_bytes: u64,
    /// CPU cap in cores.
    pub cpu_max: f64,
    /// Most processes and threads.
    pub pids_max: u32,
    /// Default timeout in ms.
    pub timeout_ms: u64,
    /// Largest timeout a request may ask for, in ms.
    pub timeout_max_ms: u64,
    /// Size of /workspace in bytes.
    pub workspace_max_bytes: u64,
    /// Size of /tmp in bytes.
    pub tmp_max_bytes: u64,
    /// Stdout cap in bytes.
    pub stdout_max_bytes: u64,
    /// Stderr cap in bytes.
    pub stderr_max_bytes: u64,
    /// Most output files returned.
    pub files_max_count: u32,
    /// Most bytes of output files returned.
    pub files_max_bytes: u64,
    /// Network policy: `none` or `allowlist`.
    pub network: String,
    /// Paths of extra directories inside the sandbox (host paths are not shown).
    pub mounts: Vec<MountInfo>,
    /// The package environment mounted into every run, if any (e.g. `python-analysis`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// Libraries importable besides the standard library, pinned: `numpy==2.4.6` (Python),
    /// `papaparse@5.7.1` (npm). Empty: standard library only.
    #[serde(default)]
    pub libraries: Vec<String>,
    /// Whether this host can run the profile now (`GET /v1/profiles`; absent where not checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available: Option<bool>,
    /// Why it cannot, with the fix, when `available` is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_reason: Option<String>,
    /// The code a request for it is refused with, when `available` is false
    /// (`runtime_unavailable`, `environment_not_installed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_code: Option<ErrorCode>,
}

/// An extra directory as the program sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MountInfo {
    /// Path inside the sandbox.
    pub path: String,
    /// Whether it is read-only.
    pub read_only: bool,
}

impl ProfileInfo {
    /// The caller's view of profile `name` of `config`, with its environment's libraries.
    pub fn in_config(name: &str, config: &crate::Config) -> Option<Self> {
        let p = config.profiles.get(name)?;
        let mut info = Self::new(name, p);
        if let Some(env) = p.environment.as_ref().and_then(|e| config.environments.get(e)) {
            info.libraries = match p.language {
                Language::Python => env.python.clone(),
                Language::Typescript => env.npm.clone(),
            };
        }
        Some(info)
    }

    /// The caller's view of `profile` named `name` (without its environment's libraries; see
    /// [`ProfileInfo::in_config`]).
    pub fn new(name: &str, p: &crate::Profile) -> Self {
        Self {
            name: name.to_owned(),
            language: p.language,
            description: p.description.clone(),
            harness: p.harness,
            harnesses: vec![Harness::Script, Harness::Function],
            memory_max_bytes: p.limits.memory_max_bytes,
            cpu_max: p.limits.cpu_max,
            pids_max: p.limits.pids_max,
            timeout_ms: p.limits.timeout_ms,
            timeout_max_ms: p.limits.timeout_max_ms,
            workspace_max_bytes: p.filesystem.workspace_max_bytes,
            tmp_max_bytes: p.filesystem.tmp_max_bytes,
            stdout_max_bytes: p.output.stdout_max_bytes,
            stderr_max_bytes: p.output.stderr_max_bytes,
            files_max_count: p.output.files_max_count,
            files_max_bytes: p.output.files_max_bytes,
            network: p.network.mode().as_str().into(),
            mounts: p.filesystem.mounts.iter().map(|m| MountInfo { path: m.sandbox.display().to_string(), read_only: m.read_only }).collect(),
            environment: p.environment.clone(),
            libraries: Vec::new(),
            available: None,
            unavailable_reason: None,
            unavailable_code: None,
        }
    }
}

/// `GET /v1/profiles` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, JsonSchema)]
pub struct ProfileList {
    /// The profiles the caller may use, by name.
    pub profiles: Vec<ProfileInfo>,
}
