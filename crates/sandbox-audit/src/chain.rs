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

/// One event as stored, with its body text exactly as hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    /// Sequence number.
    pub seq: i64,
    /// Execution id.
    pub execution_id: String,
    /// Kind, as stored.
    pub kind: String,
    /// Time, ms since the epoch.
    pub at_ms: i64,
    /// Caller.
    pub caller: String,
    /// Profile.
    pub profile: String,
    /// Language.
    pub language: Option<String>,
    /// Status.
    pub status: String,
    /// Body text.
    pub body: String,
    /// Stored previous hash.
    pub prev_hash: String,
    /// Stored hash.
    pub hash: String,
}

/// Walks `events` (in `seq` order) and reports the first one changed, removed or reordered.
/// After retention the chain starts at a later event; a `checkpoint` event in the chain must
/// vouch for exactly that start (its `prunedThroughSeq` and `prunedHash`), else the start
/// counts as removed.
pub fn verify_events(events: impl IntoIterator<Item = RawEvent>, checkpoints: &[serde_json::Value]) -> crate::VerifyReport {
    let mut events = events.into_iter().peekable();
    let (mut expected_seq, mut prev) = match events.peek() {
        Some(first) if first.seq > 1 => {
            let vouched =
                checkpoints.iter().any(|c| c["prunedThroughSeq"].as_i64() == Some(first.seq - 1) && c["prunedHash"].as_str() == Some(first.prev_hash.as_str()));
            if vouched {
                (first.seq, first.prev_hash.clone())
            } else {
                (1, GENESIS.to_owned())
            }
        }
        _ => (1, GENESIS.to_owned()),
    };
    let mut n = 0u64;
    for e in events {
        n += 1;
        let broken = |problem: &str| crate::VerifyReport {
            events: n,
            head: None,
            broken: Some(crate::Broken { seq: e.seq, execution_id: e.execution_id.clone(), problem: problem.into() }),
        };
        if e.seq != expected_seq {
            return broken(if e.seq > expected_seq { "removed" } else { "reordered" });
        }
        let recomputed = event_hash(e.seq, &e.execution_id, &e.kind, e.at_ms, &e.caller, &e.profile, e.language.as_deref(), &e.status, &e.body, &e.prev_hash);
        if recomputed != e.hash {
            return broken("changed");
        }
        if e.prev_hash != prev {
            return broken("reordered");
        }
        prev = e.hash;
        expected_seq += 1;
    }
    crate::VerifyReport { events: n, broken: None, head: None }
}
