//! The one error of the sandbox's set-up steps, in the helper, init, the rootfs, the TUN device
//! and a warm child: the step's name (reported to the engine in the `Failed` event, which names
//! it in the caller's `internal_error`) and what went wrong.

/// A set-up step that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{step}: {message}")]
pub(crate) struct StepError {
    /// The step, e.g. `pivot_root`, `uid_map`, `seccomp`.
    pub(crate) step: &'static str,
    /// What went wrong, naming what was touched.
    pub(crate) message: String,
}

impl StepError {
    /// Step `step` failed with `message`.
    pub(crate) fn new(step: &'static str, message: impl Into<String>) -> Self {
        Self { step, message: message.into() }
    }
}

/// `r`, its error as the failure of step `name`.
pub(crate) fn step<T, E: std::fmt::Display>(name: &'static str, r: Result<T, E>) -> Result<T, StepError> {
    r.map_err(|e| StepError::new(name, e.to_string()))
}
