//! The hash chain: each event's hash covers its fields and the previous event's hash.

use sha2::{Digest, Sha256};

/// `prev_hash` of the first event.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// SHA-256 (hex) over a JSON array of the event's fields and `prev_hash`; JSON encoding keeps
/// field boundaries unambiguous.
#[allow(clippy::too_many_arguments)]
pub fn event_hash(
    seq: i64,
    execution_id: &str,
    kind: &str,
    at_ms: i64,
    caller: &str,
    profile: &str,
    language: Option<&str>,
    status: &str,
    body: &str,
    prev_hash: &str,
) -> String {
    let canonical = serde_json::json!([seq, execution_id, kind, at_ms, caller, profile, language, status, body, prev_hash]);
    hex::encode(Sha256::digest(canonical.to_string().as_bytes()))
}
