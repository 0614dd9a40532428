//! Vocabulary of the Sandbox Service: wire types (request, result), stable error codes,
//! profile configuration with validation, and admission of a request against a profile.
//!
//! This crate does no I/O: callers hand it file contents, the environment and the clock.

pub mod admit;
pub mod error;
pub mod lock;
pub mod network;
pub mod path;
pub mod profile;
pub mod record;
pub mod subid;
pub mod wire;

pub use admit::{admit, Admitted, InputFile, Rejection};
pub use error::ErrorCode;
pub use path::WorkspacePath;
pub use profile::{AuditConfig, Config, ConfigError, Profile};
pub use wire::{ExecutionRequest, ExecutionResult, Harness, Language, Status};
