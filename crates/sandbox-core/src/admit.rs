//! Admission: checks a request against its profile before anything is prepared, and turns it
//! into [`Admitted`], whose fields only this check can build.

use std::collections::BTreeMap;

use base64::Engine as _;
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::profile::{validate_env, Config, Profile};
use crate::wire::FileContent;
use crate::{ErrorCode, ExecutionRequest, Harness, Language, WorkspacePath};

/// Largest `input` of the function harness, serialized, in bytes (bigger data goes in `files`).
pub const MAX_INPUT_JSON_BYTES: usize = 8 << 20;

/// Smallest timeout a request may ask for, in ms. Below it a value is almost surely seconds given
/// where milliseconds are expected (`timeout: 20` meaning 20 s); no execution could finish in it
/// anyway (start-up alone takes ~20-30 ms), so it is refused with [`ErrorCode::InvalidTimeout`]
/// and a hint naming the unit instead of running and timing out at once.
pub const MIN_TIMEOUT_MS: u64 = 100;

/// Most input files one request may carry.
pub const MAX_INPUT_FILES: usize = 10_000;

/// A request that passed admission, with defaults filled in from its profile. Only [`admit`]
/// builds one (a private field), so code that takes an `Admitted` runs only what was checked.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// Proof of admission: private, so no other crate can write an `Admitted` literal.
    _admitted_by: AdmittedBy,
    /// The profile's name.
    pub profile_name: String,
    /// The profile, as configured.
    pub profile: Profile,
    /// The language (the profile's).
    pub language: Language,
    /// The harness (requested, or the profile's).
    pub harness: Harness,
    /// The program's source.
    pub code: String,
    /// Wall-clock timeout in ms.
    pub timeout_ms: u64,
    /// Input files with decoded bytes, in name order.
    pub files: Vec<InputFile>,
    /// Output selection; `None` returns every new or changed file.
    pub outputs: Option<GlobSet>,
    /// Standard input bytes.
    pub stdin: Vec<u8>,
    /// Caller-supplied environment variables (validated).
    pub env: BTreeMap<String, String>,
    /// The function harness's input, serialized as JSON (`None` for the script harness or no input).
    pub input_json: Option<String>,
}

/// The private witness in every [`Admitted`].
#[derive(Debug, Clone, Copy)]
struct AdmittedBy;

/// One decoded input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputFile {
    /// Where it goes under /workspace.
    pub path: WorkspacePath,
    /// Its content.
    pub bytes: Vec<u8>,
}

/// Why a request was refused: a stable code, a message for humans, and the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Rejection {
    /// Stable code.
    pub code: ErrorCode,
    /// Human-readable reason.
    pub message: String,
    /// The request field at fault, e.g. `files["../x"]`.
    pub field: Option<String>,
}

impl Rejection {
    /// A rejection with `code`, `message` and the `field` at fault.
    pub fn new(code: ErrorCode, message: impl Into<String>, field: Option<String>) -> Self {
        Self { code, message: message.into(), field }
    }
}

/// Checks `req` against `config`: the profile exists, the language and harness fit it, the code is
/// not empty and within `limits.code_max_bytes`, the timeout is within [`MIN_TIMEOUT_MS`]..=`limits.timeout_max_ms`, file
/// names are [`WorkspacePath`]s and fit the workspace, `outputs` globs parse, env names are valid.
/// Errors: the first [`Rejection`] found; nothing has been touched on the host.
pub fn admit(req: &ExecutionRequest, config: &Config) -> Result<Admitted, Rejection> {
    let reject = |code, message: String, field: &str| Err(Rejection::new(code, message, Some(field.to_owned())));
    let Some(profile) = config.profiles.get(&req.profile) else {
        let known: Vec<&str> = config.profiles.keys().map(String::as_str).collect();
        return reject(ErrorCode::ProfileNotFound, format!("no profile named {:?}; known profiles: {}", req.profile, known.join(", ")), "profile");
    };
    let language = match &req.language {
        None => profile.language,
        Some(l) => Language::parse(l).map_err(|(code, m)| Rejection::new(code, m, Some("language".into())))?,
    };
    if language != profile.language {
        return reject(
            ErrorCode::UnsupportedLanguage,
            format!("profile {:?} runs {}, not {}", req.profile, profile.language.as_str(), language.as_str()),
            "language",
        );
    }
    let harness = match req.harness.as_deref() {
        None => profile.harness,
        Some("script") => Harness::Script,
        Some("function") => Harness::Function,
        Some(h) => return reject(ErrorCode::UnsupportedHarness, format!("unknown harness {h:?}; expected \"script\" or \"function\""), "harness"),
    };
    let input_json = match (&req.input, harness) {
        (None, _) => None,
        (Some(_), Harness::Script) => {
            return reject(
                ErrorCode::InvalidRequest,
                "input is passed to main(input) by the function harness; this request runs the script harness (set \"harness\": \"function\")".into(),
                "input",
            )
        }
        (Some(v), Harness::Function) => {
            let text = serde_json::to_string(v).expect("a JSON value always serializes");
            if text.len() > MAX_INPUT_JSON_BYTES {
                return reject(
                    ErrorCode::InputTooLarge,
                    format!("input is {} bytes of JSON; at most {MAX_INPUT_JSON_BYTES} are accepted (send bigger data as files)", text.len()),
                    "input",
                );
            }
            Some(text)
        }
    };
    if req.code.trim().is_empty() {
        return reject(ErrorCode::EmptyCode, "the code is empty".into(), "code");
    }
    if req.code.len() as u64 > profile.limits.code_max_bytes {
        return reject(
            ErrorCode::CodeTooLarge,
            format!("the code is {} bytes; profile {:?} accepts at most {}", req.code.len(), req.profile, profile.limits.code_max_bytes),
            "code",
        );
    }
    let timeout_ms = match req.timeout {
        None => profile.limits.timeout_ms,
        Some(t) if t < MIN_TIMEOUT_MS => {
            return reject(
                ErrorCode::InvalidTimeout,
                format!(
                    "timeout {t} is below the minimum of {MIN_TIMEOUT_MS}: the timeout is in milliseconds{}",
                    if t == 0 { String::new() } else { format!(" (for {t} seconds, send {})", t * 1000) }
                ),
                "timeout",
            )
        }
        Some(t) if t > profile.limits.timeout_max_ms => {
            return reject(
                ErrorCode::TimeoutTooLarge,
                format!("timeout {t} ms is above profile {:?}'s maximum of {} ms", req.profile, profile.limits.timeout_max_ms),
                "timeout",
            )
        }
        Some(t) => t,
    };
    let files = admit_files(req, profile)?;
    let outputs = admit_outputs(&req.outputs)?;
    for (k, v) in &req.env {
        validate_env(k, v).map_err(|m| Rejection::new(ErrorCode::InvalidEnv, m, Some(format!("env.{k}"))))?;
    }
    let stdin = match &req.stdin {
        None => Vec::new(),
        Some(c) => decode(c).map_err(|m| Rejection::new(ErrorCode::InvalidFileContent, m, Some("stdin".into())))?,
    };
    Ok(Admitted {
        _admitted_by: AdmittedBy,
        profile_name: req.profile.clone(),
        profile: profile.clone(),
        language,
        harness,
        code: req.code.clone(),
        timeout_ms,
        files,
        outputs,
        stdin,
        env: req.env.clone(),
        input_json,
    })
}

fn admit_files(req: &ExecutionRequest, profile: &Profile) -> Result<Vec<InputFile>, Rejection> {
    if req.files.len() > MAX_INPUT_FILES {
        return Err(Rejection::new(ErrorCode::InputTooLarge, format!("{} input files; at most {MAX_INPUT_FILES}", req.files.len()), Some("files".into())));
    }
    let mut files = Vec::with_capacity(req.files.len());
    let mut total: u64 = 0;
    for (name, content) in &req.files {
        let field = Some(format!("files[{name:?}]"));
        let path = WorkspacePath::parse(name).map_err(|e| Rejection::new(e.code(), e.to_string(), field.clone()))?;
        let bytes = decode(content).map_err(|m| Rejection::new(ErrorCode::InvalidFileContent, m, field.clone()))?;
        total += bytes.len() as u64;
        if total > profile.filesystem.workspace_max_bytes {
            return Err(Rejection::new(
                ErrorCode::InputTooLarge,
                format!("input files total more than the workspace's {} bytes", profile.filesystem.workspace_max_bytes),
                field,
            ));
        }
        files.push(InputFile { path, bytes });
    }
    // "a" as a file and "a/b" as another cannot both exist. Every parent directory of every file
    // is checked against the set of files (neighbours in name order are not enough: "a", "a.txt",
    // "a/b" sort with "a.txt" between the two).
    let names: std::collections::BTreeSet<&str> = files.iter().map(|f| f.path.as_str()).collect();
    for f in &files {
        let b = f.path.as_str();
        for (i, _) in b.match_indices('/') {
            let a = &b[..i];
            if names.contains(a) {
                return Err(Rejection::new(
                    ErrorCode::InvalidFileName,
                    format!("{a:?} is both a file and the directory of {b:?}"),
                    Some(format!("files[{b:?}]")),
                ));
            }
        }
    }
    Ok(files)
}

fn admit_outputs(patterns: &[String]) -> Result<Option<GlobSet>, Rejection> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut set = GlobSetBuilder::new();
    for (i, p) in patterns.iter().enumerate() {
        let glob = GlobBuilder::new(p)
            .literal_separator(true)
            .build()
            .map_err(|e| Rejection::new(ErrorCode::InvalidOutputPattern, format!("invalid glob {p:?}: {}", e.kind()), Some(format!("outputs[{i}]"))))?;
        set.add(glob);
    }
    let set = set.build().map_err(|e| Rejection::new(ErrorCode::InvalidOutputPattern, e.to_string(), Some("outputs".into())))?;
    Ok(Some(set))
}

fn decode(content: &FileContent) -> Result<Vec<u8>, String> {
    match content {
        FileContent::Text(t) => Ok(t.as_bytes().to_vec()),
        FileContent::Base64 { base64 } => base64::engine::general_purpose::STANDARD.decode(base64.trim()).map_err(|e| format!("invalid base64: {e}")),
    }
}

#[cfg(test)]
mod tests;
