//! An [`ExecutionResult`] as a `tools/call` result: `structuredContent` (the HTTP result object
//! with file bytes moved to content blocks), one text block for the model, PNG/JPEG files as
//! `image` blocks and other files as embedded resources, all within [`RESULT_MAX_BYTES`]; files
//! that do not fit are `resource_link` blocks (with size and sha256) to read with `resources/read`.
//!
//! `isError` is false exactly when the status is `ok` (the program ran and exited 0); every other
//! status (the program failed, a limit ended it, the sandbox refused the request, the service
//! failed) is `isError: true`, with the status and error code named in the text block.

use std::fmt::Write as _;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use sandbox_core::wire::ExecutionResult;
use sandbox_core::Status;
use serde_json::{json, Map, Value};

/// Largest serialized `tools/call` result, in bytes: under the 1 MiB the official Python SDK
/// accepts for one streamed event, with room for the JSON-RPC envelope and SSE framing.
pub const RESULT_MAX_BYTES: usize = 900 * 1024;
/// Most bytes (as JSON text) of stdout kept in `structuredContent`.
pub const STRUCTURED_STDOUT_MAX: usize = 256 * 1024;
/// Most bytes (as JSON text) of stderr kept in `structuredContent`.
pub const STRUCTURED_STDERR_MAX: usize = 128 * 1024;
/// Most bytes of serialized `returnData` kept in `structuredContent`.
pub const STRUCTURED_RETURN_MAX: usize = 128 * 1024;
/// Most bytes of stdout and of stderr quoted in the text block for the model.
const TEXT_STREAM_MAX: usize = 8 * 1024;
/// Most bytes of `returnData` quoted in the text block.
const TEXT_RETURN_MAX: usize = 4 * 1024;
/// Room kept for the JSON-RPC envelope around the result.
const ENVELOPE_BYTES: usize = 4 * 1024;

/// The resource URI of an execution's output file `name` (percent-encoded, RFC 3986).
pub fn file_uri(execution_id: &str, name: &str) -> String {
    format!("sandbox://executions/{execution_id}/files/{}", percent_encode(name))
}

/// Bytes escaped in a file name of a resource URI: all but RFC 3986 unreserved characters and `/`.
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~').remove(b'/');

/// `name` with every byte outside RFC 3986 unreserved characters and `/` percent-encoded.
pub fn percent_encode(name: &str) -> String {
    utf8_percent_encode(name, ESCAPED).to_string()
}

/// The inverse of [`percent_encode`]; `None` for a malformed escape or non-UTF-8 result.
pub fn percent_decode(s: &str) -> Option<String> {
    // percent_decode_str leaves a malformed escape as it is; a URI of ours never has one.
    let malformed = s.match_indices('%').any(|(i, _)| !s.get(i + 1..i + 3).is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit())));
    if malformed {
        return None;
    }
    percent_encoding::percent_decode_str(s).decode_utf8().ok().map(std::borrow::Cow::into_owned)
}

/// The resource URI of an execution's whole stdout or stderr (`stream` is `stdout`/`stderr`).
pub fn stream_uri(execution_id: &str, stream: &str) -> String {
    format!("sandbox://executions/{execution_id}/{stream}")
}

/// Renders `result` (see the module doc for the contract).
pub fn tool_result(result: &ExecutionResult) -> CallToolResult {
    let mut structured = match serde_json::to_value(result) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    // The exact bytes of non-UTF-8 streams are resources; they would double the size here.
    structured.shift_remove("stdoutBase64");
    structured.shift_remove("stderrBase64");
    for (key, max, omitted_key) in [("stdout", STRUCTURED_STDOUT_MAX, "stdoutOmittedBytes"), ("stderr", STRUCTURED_STDERR_MAX, "stderrOmittedBytes")] {
        if let Some(Value::String(s)) = structured.get(key) {
            let kept = prefix_within(s, max);
            if kept.len() < s.len() {
                let omitted = s.len() - kept.len();
                let kept = kept.to_owned();
                structured.insert(key.into(), Value::String(kept));
                structured.insert(omitted_key.into(), json!(omitted));
            }
        }
    }
    if let Some(data) = &result.return_data {
        let len = data.to_string().len();
        if len > STRUCTURED_RETURN_MAX {
            structured.shift_remove("returnData");
            structured.insert("returnDataOmittedBytes".into(), json!(len));
        }
    }
    let mut files = Map::new();
    for (name, f) in &result.files {
        files.insert(
            name.clone(),
            json!({ "size": f.size, "sha256": f.sha256, "mimeType": f.mime_type,
                    "uri": file_uri(&result.execution_id, name), "inline": false }),
        );
    }
    structured.insert("files".into(), Value::Object(files));

    // File blocks, images first, then smaller files first, while they fit.
    let mut order: Vec<&String> = result.files.keys().collect();
    order.sort_by_key(|n| (!is_image(&result.files[*n].mime_type), result.files[*n].size));
    let mut inline: Vec<&String> = Vec::new();
    let base = serialized_len(&assemble(result, &structured, &[])) + ENVELOPE_BYTES;
    let mut used = base;
    for name in order {
        let cost = result.files[name].base64.len() + name.len() * 2 + result.execution_id.len() + 256;
        if used + cost <= RESULT_MAX_BYTES {
            used += cost;
            inline.push(name);
        }
    }
    loop {
        set_inline(&mut structured, &inline);
        let out = assemble(result, &structured, &inline);
        // The estimate above is close; this check makes the budget exact.
        if serialized_len(&out) + ENVELOPE_BYTES <= RESULT_MAX_BYTES || inline.is_empty() {
            return out;
        }
        let largest = inline.iter().enumerate().max_by_key(|(_, n)| result.files[**n].size).map(|(i, _)| i).expect("not empty");
        inline.remove(largest);
    }
}

fn set_inline(structured: &mut Map<String, Value>, inline: &[&String]) {
    if let Some(Value::Object(files)) = structured.get_mut("files") {
        for (name, f) in files.iter_mut() {
            f["inline"] = Value::Bool(inline.contains(&name));
        }
    }
}

fn assemble(result: &ExecutionResult, structured: &Map<String, Value>, inline: &[&String]) -> CallToolResult {
    let mut content = vec![ContentBlock::text(summary(result, structured, inline))];
    for name in inline {
        let f = &result.files[*name];
        let uri = file_uri(&result.execution_id, name);
        if is_image(&f.mime_type) {
            content.push(ContentBlock::image(f.base64.clone(), f.mime_type.clone()));
        } else {
            let text = text_of(f);
            let contents = match text {
                Some(t) => ResourceContents::text(t, uri),
                None => ResourceContents::blob(f.base64.clone(), uri),
            };
            content.push(ContentBlock::resource(contents.with_mime_type(f.mime_type.clone())));
        }
    }
    // Files that did not fit: links the client can follow with resources/read.
    for (name, f) in result.files.iter().filter(|(n, _)| !inline.contains(n)) {
        let link = rmcp::model::Resource::new(file_uri(&result.execution_id, name), name.clone())
            .with_mime_type(f.mime_type.clone())
            .with_size(f.size)
            .with_description(format!("sha256 {}", f.sha256));
        content.push(ContentBlock::resource_link(link));
    }
    let mut out = if result.status == Status::Ok { CallToolResult::success(content) } else { CallToolResult::error(content) };
    out.structured_content = Some(Value::Object(structured.clone()));
    out
}

fn is_image(mime: &str) -> bool {
    matches!(mime, "image/png" | "image/jpeg")
}

/// The file's text when it is UTF-8 of a textual type (text/*, JSON, CSV, XML, SVG, ...).
fn text_of(f: &sandbox_core::wire::OutputFile) -> Option<String> {
    use base64::Engine as _;
    let textual = f.mime_type.starts_with("text/")
        || ["application/json", "application/xml", "image/svg+xml", "application/javascript", "application/toml"].contains(&f.mime_type.as_str());
    if !textual {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(&f.base64).ok()?;
    String::from_utf8(bytes).ok()
}

fn serialized_len(r: &CallToolResult) -> usize {
    serde_json::to_vec(r).map_or(usize::MAX, |v| v.len())
}

/// The longest prefix of `s` (on a char boundary) whose JSON string encoding is at most `max` bytes.
pub fn prefix_within(s: &str, max: usize) -> &str {
    let mut size = 2; // the quotes
    for (i, c) in s.char_indices() {
        size += match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        };
        if size > max {
            return &s[..i];
        }
    }
    s
}

/// Head and tail of `s` within about `max` bytes, with a marker naming what was left out.
fn excerpt(s: &str, max: usize, whole: &str) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let head = prefix_within(s, max * 3 / 4);
    let mut tail_start = s.len() - (max / 4).min(s.len());
    while !s.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    format!("{head}\n[... {} bytes omitted; {whole} ...]\n{}", tail_start - head.len(), &s[tail_start..])
}

/// The text block: what happened, in the words a model needs to decide what to do next.
fn summary(result: &ExecutionResult, structured: &Map<String, Value>, inline: &[&String]) -> String {
    let mut t = String::new();
    let id = &result.execution_id;
    let code = result.error.as_ref().map(|e| e.kind.as_str()).unwrap_or("");
    let message = result.error.as_ref().map(|e| e.message.as_str()).unwrap_or("");
    let _ = match result.status {
        Status::Ok => writeln!(t, "status: ok — the program ran and exited 0 ({} ms, profile {})", result.duration_ms, result.profile),
        Status::Error => match (result.exit_code, &result.signal_name) {
            (_, Some(sig)) => writeln!(t, "status: error — the program ran and was killed by {sig} ({} ms, profile {})", result.duration_ms, result.profile),
            (Some(c), None) => writeln!(t, "status: error — the program ran and failed with exit code {c} ({} ms, profile {})", result.duration_ms, result.profile),
            (None, None) => writeln!(t, "status: error — the program failed before it ran: {code}: {message}"),
        },
        Status::Timeout => writeln!(t, "status: timeout — the program ran past its timeout and was killed ({} ms, profile {}); ask for a larger timeout_ms (up to the profile's maximum) or make it faster", result.duration_ms, result.profile),
        Status::MemoryLimit => writeln!(t, "status: memory_limit — the program used more memory than profile {} allows and was killed", result.profile),
        Status::OutputLimit => writeln!(t, "status: output_limit — the program wrote more output than profile {} allows and was stopped", result.profile),
        Status::Rejected => writeln!(t, "status: rejected ({code}) — the sandbox did not run the program: {message}"),
        Status::InternalError => writeln!(t, "status: internal_error ({code}) — the sandbox service failed; the program's outcome is unknown: {message}"),
    };
    if let Some(e) = &result.error {
        if !matches!(result.status, Status::Rejected | Status::InternalError) {
            let _ = writeln!(t, "error: {}: {}", e.kind, e.message);
        }
        if let Some(f) = &e.field {
            let _ = writeln!(t, "field: {f}");
        }
    }
    if result.status != Status::Rejected && !id.is_empty() {
        let _ = writeln!(t, "execution: {id}");
    }
    for (name, text, truncated, omitted_key) in
        [("stdout", &result.stdout, result.stdout_truncated, "stdoutOmittedBytes"), ("stderr", &result.stderr, result.stderr_truncated, "stderrOmittedBytes")]
    {
        if text.is_empty() {
            continue;
        }
        let _ = writeln!(t, "--- {name} ---");
        let whole = format!("the whole {name} is resource {}", stream_uri(id, name));
        t.push_str(&excerpt(text, TEXT_STREAM_MAX, &whole));
        if !t.ends_with('\n') {
            t.push('\n');
        }
        if truncated {
            let _ = writeln!(t, "[{name} passed the profile's cap; the sandbox discarded the rest]");
        }
        if let Some(n) = structured.get(omitted_key) {
            let _ = writeln!(t, "[structuredContent holds the first part of {name}; {n} more bytes are in {}]", stream_uri(id, name));
        }
    }
    if let Some(data) = &result.return_data {
        let s = data.to_string();
        let whole = if structured.contains_key("returnData") {
            "the whole value is structuredContent.returnData".to_owned()
        } else {
            format!("the whole value is resource {}", stream_uri(id, "return-data"))
        };
        let _ = writeln!(t, "--- returnData ---\n{}", excerpt(&s, TEXT_RETURN_MAX, &whole));
    }
    if !result.files.is_empty() {
        let _ = writeln!(t, "--- files ---");
        for (name, f) in &result.files {
            let how = if inline.contains(&name) {
                if is_image(&f.mime_type) {
                    "attached as an image"
                } else {
                    "attached as an embedded resource"
                }
            } else {
                "not attached (size budget): a resource link, read it with resources/read"
            };
            let _ = writeln!(t, "{name}: {} bytes, {}, sha256 {}, {how}: {}", f.size, f.mime_type, f.sha256, file_uri(id, name));
        }
    }
    for s in &result.skipped_files {
        let _ = writeln!(t, "{}: not returned ({})", s.name, s.reason);
    }
    t
}

#[cfg(test)]
mod tests;
