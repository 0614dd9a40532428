//! Unit tests of result rendering: `isError`, the text block, the size budget.

use std::collections::BTreeMap;

use base64::Engine as _;
use sandbox_core::wire::{ExecError, OutputFile};

use super::*;

fn file(bytes: &[u8], mime: &str) -> OutputFile {
    use sha2::Digest as _;
    OutputFile {
        base64: base64::engine::general_purpose::STANDARD.encode(bytes),
        size: bytes.len() as u64,
        sha256: hex::encode(sha2::Sha256::digest(bytes)),
        mime_type: mime.into(),
    }
}

fn result(status: Status) -> ExecutionResult {
    ExecutionResult { execution_id: "01j".into(), status, profile: "python-default".into(), ..Default::default() }
}

#[track_caller]
fn check_is_error(status: Status, want: bool) {
    assert_eq!(tool_result(&result(status)).is_error, Some(want), "{status:?}");
}

#[test]
fn is_error_exactly_when_the_status_is_not_ok() {
    check_is_error(Status::Ok, false);
    for s in [Status::Error, Status::Timeout, Status::MemoryLimit, Status::OutputLimit, Status::Rejected, Status::InternalError] {
        check_is_error(s, true);
    }
}

#[test]
fn the_text_names_the_kind_of_failure() {
    let mut r = result(Status::Rejected);
    r.error = Some(ExecError { field: Some("profile".into()), ..ExecError::new("profile_not_found", "no profile named \"x\"") });
    let text = tool_result(&r).content[0].as_text().expect("text first").text.clone();
    assert!(text.starts_with("status: rejected (profile_not_found) — the sandbox did not run the program"), "{text}");
    assert!(text.contains("field: profile"), "{text}");
    let mut r = result(Status::Error);
    r.exit_code = Some(1);
    r.stderr = "ValueError: x\n".into();
    let text = tool_result(&r).content[0].as_text().expect("text first").text.clone();
    assert!(text.contains("the program ran and failed with exit code 1") && text.contains("ValueError: x"), "{text}");
}

#[test]
fn images_are_image_blocks_and_other_files_embedded_resources() {
    let mut r = result(Status::Ok);
    r.files = BTreeMap::from([
        ("plot.png".into(), file(b"\x89PNG....", "image/png")),
        ("data.csv".into(), file(b"a,b\n1,2\n", "text/csv")),
        ("raw.bin".into(), file(&[0, 159, 146, 150], "application/octet-stream")),
    ]);
    let out = tool_result(&r);
    let json = serde_json::to_value(&out).expect("serializes");
    let kinds: Vec<&str> = json["content"].as_array().expect("content").iter().map(|c| c["type"].as_str().expect("type")).collect();
    assert_eq!(kinds, ["text", "image", "resource", "resource"]);
    assert_eq!(json["content"][1]["mimeType"], "image/png");
    let resources: Vec<&Value> = json["content"].as_array().expect("content")[2..].iter().map(|c| &c["resource"]).collect();
    assert!(resources.iter().any(|r| r["text"] == "a,b\n1,2\n" && r["uri"] == "sandbox://executions/01j/files/data.csv"));
    assert!(resources.iter().any(|r| r["blob"] == "AJ+Slg==" && r["mimeType"] == "application/octet-stream"));
    let files = &json["structuredContent"]["files"];
    assert_eq!(files["plot.png"]["inline"], true);
    assert!(files["plot.png"].get("base64").is_none(), "bytes are content blocks, not structuredContent");
}

#[test]
fn a_result_at_every_cap_fits_the_budget() {
    let mut r = result(Status::OutputLimit);
    // Control characters take six bytes each in JSON.
    r.stdout = "\u{1}".repeat(1 << 20);
    r.stderr = "\"".repeat(1 << 20);
    r.stdout_base64 = Some("A".repeat(1 << 21));
    r.files = (0..40).map(|i| (format!("f{i} with space.png"), file(&vec![7u8; 60_000], "image/png"))).collect();
    r.return_data = Some(json!({ "big": "y".repeat(1 << 20) }));
    let out = tool_result(&r);
    let size = serde_json::to_vec(&out).expect("serializes").len();
    assert!(size + ENVELOPE_BYTES <= RESULT_MAX_BYTES, "{size} bytes");
    let s = out.structured_content.as_ref().expect("structured");
    assert!(s["stdoutOmittedBytes"].as_u64().expect("omitted") > 0 && s["stderrOmittedBytes"].as_u64().expect("omitted") > 0);
    assert!(s.get("stdoutBase64").is_none());
    let inline = s["files"].as_object().expect("files").values().filter(|f| f["inline"] == true).count();
    assert!(inline > 0 && inline < 40, "{inline} of 40 files inline");
    let json = serde_json::to_value(&out).expect("serializes");
    let links: Vec<&Value> = json["content"].as_array().expect("content").iter().filter(|c| c["type"] == "resource_link").collect();
    assert_eq!(links.len(), 40 - inline);
    assert!(links.iter().all(|l| l["size"] == 60_000 && l["description"].as_str().is_some_and(|d| d.starts_with("sha256 "))));
    assert_eq!(s["files"]["f0 with space.png"]["uri"], "sandbox://executions/01j/files/f0%20with%20space.png");
}

#[test]
fn prefix_within_counts_json_escapes_and_keeps_char_boundaries() {
    assert_eq!(prefix_within("abc", 5), "abc");
    assert_eq!(prefix_within("abcd", 5), "abc");
    assert_eq!(prefix_within("\n\n", 5), "\n");
    assert_eq!(prefix_within("é", 3), "");
    assert_eq!(prefix_within("é", 4), "é");
}

#[test]
fn percent_encoding_round_trips() {
    for name in ["plot.png", "out/a b.csv", "ü%.txt"] {
        assert_eq!(percent_decode(&percent_encode(name)).as_deref(), Some(name));
    }
    assert_eq!(percent_encode("a b/c"), "a%20b/c");
    assert_eq!(percent_decode("%zz"), None);
}
