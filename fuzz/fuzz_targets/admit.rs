//! An HTTP request body, as `POST /v1/executions` decodes it (JSON into `ExecutionRequest`), into
//! admission (`sandbox_core::admit`) against the built-in profiles: no panic, bounded memory.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use sandbox_core::{admit, Config, ExecutionRequest};

fuzz_target!(|data: &[u8]| {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    let config = CONFIG.get_or_init(Config::builtin);
    if let Ok(req) = serde_json::from_slice::<ExecutionRequest>(data) {
        let _ = admit(&req, config);
    }
});
