//! Stable error codes: the one vocabulary every front door (CLI, HTTP, MCP) maps failures to.

use serde::{Deserialize, Serialize};

/// A caller-visible failure, stable across releases. Serialized in `snake_case`
/// (`"invalid_file_name"`); the CLI exits with [`ErrorCode::exit_code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is malformed (bad JSON shape, contradictory fields).
    InvalidRequest,
    /// No profile of that name is configured.
    ProfileNotFound,
    /// The language is unknown or not the one the profile runs.
    UnsupportedLanguage,
    /// The harness is unknown or not available for the profile.
    UnsupportedHarness,
    /// The code is empty or only whitespace.
    EmptyCode,
    /// The code is larger than the profile allows.
    CodeTooLarge,
    /// An input file name is absolute, empty, contains `..`, a backslash, NUL or a control character.
    InvalidFileName,
    /// An input file's content is not valid (bad base64).
    InvalidFileContent,
    /// The input files are larger in total than the workspace, or more than allowed.
    InputTooLarge,
    /// The requested timeout is above the profile's maximum.
    TimeoutTooLarge,
    /// The requested timeout is below [`crate::admit::MIN_TIMEOUT_MS`] (zero, or almost surely
    /// seconds where milliseconds are expected).
    InvalidTimeout,
    /// An environment variable name or value is not allowed.
    InvalidEnv,
    /// An `outputs` glob does not parse.
    InvalidOutputPattern,
    /// The host lacks a feature the profile needs (a cgroup controller, landlock, a runtime binary).
    RuntimeUnavailable,
    /// The profile's package environment is not installed on this host; the message names the
    /// command that installs it (`sandbox env install NAME`).
    EnvironmentNotInstalled,
    /// The configuration file is invalid.
    InvalidConfig,
    /// The service failed; the message names the execution id, the log has the cause.
    InternalError,
    /// No or an unknown API key (HTTP 401).
    Unauthorized,
    /// The API key may not use this profile (HTTP 403).
    ForbiddenProfile,
    /// The API key lacks the role the route needs: `metrics` for `GET /metrics` when API keys
    /// are configured (HTTP 403).
    Forbidden,
    /// Every execution slot and queue place is taken; retry after the Retry-After seconds (HTTP 429).
    QueueFull,
    /// The request body is larger than the service accepts (HTTP 413).
    BodyTooLarge,
    /// No such resource (HTTP 404).
    NotFound,
    /// The service is shutting down and takes no new executions (HTTP 503).
    ShuttingDown,
    /// This client address had too many requests refused lately; retry after the Retry-After
    /// seconds (HTTP 429). Only refusals count, so requests that succeed are never limited.
    RateLimited,
    /// The request's `Host` is not one this service answers to (HTTP 421): DNS rebinding defence.
    HostNotAllowed,
    /// The request comes from a browser page whose `Origin` is not allowed (HTTP 403).
    OriginNotAllowed,
    /// The API key already has its `max_concurrent` executions running (over every node);
    /// retry after the Retry-After seconds (HTTP 429).
    ConcurrencyLimited,
    /// The audit log cannot be written (the database is unreachable), so nothing runs: the
    /// service fails closed and recovers by itself when the database is back (HTTP 503).
    AuditUnavailable,
}

impl ErrorCode {
    /// The code as it appears on the wire, e.g. `"invalid_file_name"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::ProfileNotFound => "profile_not_found",
            Self::UnsupportedLanguage => "unsupported_language",
            Self::UnsupportedHarness => "unsupported_harness",
            Self::EmptyCode => "empty_code",
            Self::CodeTooLarge => "code_too_large",
            Self::InvalidFileName => "invalid_file_name",
            Self::InvalidFileContent => "invalid_file_content",
            Self::InputTooLarge => "input_too_large",
            Self::TimeoutTooLarge => "timeout_too_large",
            Self::InvalidTimeout => "invalid_timeout",
            Self::InvalidEnv => "invalid_env",
            Self::InvalidOutputPattern => "invalid_output_pattern",
            Self::RuntimeUnavailable => "runtime_unavailable",
            Self::EnvironmentNotInstalled => "environment_not_installed",
            Self::InvalidConfig => "invalid_config",
            Self::InternalError => "internal_error",
            Self::Unauthorized => "unauthorized",
            Self::ForbiddenProfile => "forbidden_profile",
            Self::Forbidden => "forbidden",
            Self::QueueFull => "queue_full",
            Self::BodyTooLarge => "body_too_large",
            Self::NotFound => "not_found",
            Self::ShuttingDown => "shutting_down",
            Self::RateLimited => "rate_limited",
            Self::HostNotAllowed => "host_not_allowed",
            Self::OriginNotAllowed => "origin_not_allowed",
            Self::ConcurrencyLimited => "concurrency_limited",
            Self::AuditUnavailable => "audit_unavailable",
        }
    }

    /// The code named `s` on the wire (`"invalid_file_name"`), if it is one.
    pub fn parse(s: &str) -> Option<Self> {
        serde_json::from_value(serde_json::Value::String(s.to_owned())).ok()
    }

    /// Exit code of the `sandbox` CLI when it fails with this code before the program ran:
    /// 2 for a rejected request or bad configuration, 3 when the host cannot run the
    /// profile, 4 for an internal error. (A program that ran exits with its own code.)
    pub fn exit_code(self) -> i32 {
        match self {
            Self::RuntimeUnavailable | Self::EnvironmentNotInstalled | Self::ShuttingDown | Self::AuditUnavailable => 3,
            Self::InternalError => 4,
            _ => 2,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
