//! The arguments of an MCP `tools/call sandbox_execute_code` (a JSON object) mapped to an
//! execution request (`sandbox_mcp::execute_request`) for a caller that may use every profile
//! and for one limited to a single profile, then admitted as the service would: no panic,
//! bounded memory.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sandbox_core::{admit, Config};
use sandbox_mcp::{execute_request, Principal};

fuzz_target!(|data: &[u8]| {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    let config = CONFIG.get_or_init(Config::builtin);
    let Ok(args) = serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(data) else { return };
    let everyone = Principal::local("cli:fuzz");
    let limited = Principal { audit_name: "key:fuzz".into(), profiles: vec!["typescript-default".into()], peer: None };
    for principal in [&everyone, &limited] {
        if let Ok(req) = execute_request(config, principal, Some(args.clone())) {
            let _ = admit(&req, config);
        }
    }
});
