//! Unit tests of the tool definitions: the output schema describes every field a result can
//! carry, and the tool list is committed (`tools.json`, regenerate with `UPDATE_MCP_TOOLS=1`).

use std::collections::BTreeMap;

use sandbox_core::wire::{CgroupVersion, Enforcement, ExecError, NetworkMode, OutputFile, SkipReason, SkippedFile};
use sandbox_core::{Config, ExecutionResult, Status};

use super::*;

/// A result with every optional field set.
fn full_result() -> ExecutionResult {
    ExecutionResult {
        execution_id: "01j".into(),
        status: Status::Error,
        profile: "python-default".into(),
        language: Some(Language::Python),
        stdout: "x".repeat(300 << 10),
        stderr: "e".repeat(200 << 10),
        stdout_base64: Some("AA==".into()),
        stderr_base64: Some("AA==".into()),
        exit_code: Some(137),
        signal: Some(9),
        signal_name: Some("SIGKILL".into()),
        files: BTreeMap::from([("a.txt".into(), OutputFile { base64: "YQ==".into(), size: 1, sha256: "ca97".into(), mime_type: "text/plain".into() })]),
        skipped_files: vec![SkippedFile { name: "link".into(), reason: SkipReason::Symlink, size: Some(3), count: None }],
        return_data: Some(json!({"k": 1})),
        network: Some(sandbox_core::network::NetworkReport {
            allowed: vec![sandbox_core::network::AllowedConnection {
                host: Some("api.test".into()),
                address: "198.18.0.2".into(),
                port: 443,
                protocol: "tcp".into(),
                bytes_sent: 1,
                bytes_received: 2,
                started_at: "2026-11-30T00:00:00Z".into(),
                duration_ms: 3,
                error: Some("reset".into()),
            }],
            blocked: vec![sandbox_core::network::BlockedAttempt {
                host: Some("evil.test".into()),
                address: "10.200.0.1".into(),
                port: Some(53),
                protocol: "dns".into(),
                at: "2026-11-30T00:00:00Z".into(),
                reason: "name_not_allowed".into(),
            }],
            allowed_omitted: 0,
            blocked_omitted: 0,
            buffer_peak_bytes: 0,
        }),
        enforcement: Some(Enforcement { cgroup: CgroupVersion::V2, landlock_abi: 3, seccomp: true, network: NetworkMode::None }),
        error: Some(ExecError {
            field: Some("code".into()),
            line: Some(1),
            column: Some(2),
            traceback: Some("tb".into()),
            ..ExecError::new("SyntaxError", "bad")
        }),
        ..Default::default()
    }
}

/// Every key of `value` is a property of `schema` (following `$ref`s into `$defs`), recursively.
#[track_caller]
fn check_described(value: &Value, schema: &Value, defs: &Value, path: &str) {
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => &defs[r.trim_start_matches("#/$defs/")],
        None => schema,
    };
    let schema = schema.get("anyOf").and_then(|a| a.as_array()?.iter().find(|s| s.get("type") != Some(&json!("null")))).unwrap_or(schema);
    let schema = match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => &defs[r.trim_start_matches("#/$defs/")],
        None => schema,
    };
    if let Value::Object(map) = value {
        let props = schema.get("properties");
        let extra = schema.get("additionalProperties");
        for (k, v) in map {
            let sub = match props.and_then(|p| p.get(k)) {
                Some(s) => s,
                None => match extra {
                    Some(s) if s.is_object() => s,
                    _ if path.ends_with("returnData") => continue,
                    _ => panic!("{path}.{k} is not described by the output schema"),
                },
            };
            check_described(v, sub, defs, &format!("{path}.{k}"));
        }
    }
}

#[test]
fn the_output_schema_describes_every_field_of_a_result() {
    let out = render::tool_result(&full_result());
    let schema = Value::Object((*schema::execute_output_schema()).clone());
    let value = out.structured_content.expect("structured");
    check_described(&value, &schema, &schema["$defs"], "structuredContent");
    for required in schema["required"].as_array().expect("required") {
        let key = required.as_str().expect("a name");
        let empty = render::tool_result(&ExecutionResult::default()).structured_content.expect("structured");
        assert!(empty.get(key).is_some(), "required {key} is missing from a minimal result");
    }
}

#[test]
fn the_tool_list_is_committed() {
    let tools = serde_json::to_string_pretty(&tools(&Config::builtin(), None)).expect("serializes") + "\n";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools.json");
    if std::env::var_os("UPDATE_MCP_TOOLS").is_some() {
        std::fs::write(&path, &tools).expect("write tools.json");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(committed == tools, "{} is stale: run UPDATE_MCP_TOOLS=1 cargo test -p sandbox-mcp", path.display());
}

#[test]
fn the_client_label_is_printable_and_bounded() {
    assert_eq!(client_label(Some(Implementation::new("claude-code", "2.1.0"))), "claude-code@2.1.0");
    assert_eq!(client_label(Some(Implementation::new("a/b@c\n", "9".repeat(100)))), format!("abc@{}", "9".repeat(64)));
    assert_eq!(client_label(None), "unknown");
}
