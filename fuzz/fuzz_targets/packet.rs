//! One IP packet from the sandbox (its TUN) through the allowlist's packet filter, and the DNS
//! answer or RST the filter's verdict leads to (`sandbox_network::fuzzing::packet`): no panic,
//! bounded memory. The engine runs this as host root on bytes the program chose.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| sandbox_network::fuzzing::packet(data));
