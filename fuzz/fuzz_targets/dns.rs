//! One DNS message from the sandbox to its resolver (`sandbox_network::fuzzing::dns`): parsed,
//! checked against the allowlist, answered and screened: no panic, bounded memory. The engine
//! runs this as host root on bytes the program chose.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sandbox_network::fuzzing::dns(data));
