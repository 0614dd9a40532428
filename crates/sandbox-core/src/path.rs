//! Workspace-relative file names that passed validation.

use crate::ErrorCode;

/// Longest accepted file name, in bytes (Linux `PATH_MAX` less room for `/workspace/`).
pub const MAX_PATH_BYTES: usize = 4000;
/// Longest accepted single path component, in bytes (Linux `NAME_MAX`).
pub const MAX_COMPONENT_BYTES: usize = 255;

/// A relative path inside `/workspace`, e.g. `data.csv` or `out/plot.png`: not empty, not
/// absolute, no `.` or `..` component, no empty component, no backslash, no NUL or other
/// control character, components of at most 255 bytes. Only [`WorkspacePath::parse`] makes one,
/// so code after admission cannot be handed `../etc/passwd`. Unicode is kept as given (no
/// normalisation).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkspacePath(String);

/// Why a file name was refused; [`PathError::code`] is always [`ErrorCode::InvalidFileName`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid file name {name:?}: {reason}")]
pub struct PathError {
    /// The name as given.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl PathError {
    /// The stable error code of every path error.
    pub fn code(&self) -> ErrorCode {
        ErrorCode::InvalidFileName
    }
}

impl WorkspacePath {
    /// Validates `name` as a workspace-relative path.
    /// Errors: [`PathError`] with the reason (absolute, `..`, empty, backslash, control character, too long).
    pub fn parse(name: &str) -> Result<Self, PathError> {
        let fail = |reason| Err(PathError { name: name.to_owned(), reason });
        if name.is_empty() {
            return fail("the name is empty");
        }
        if name.len() > MAX_PATH_BYTES {
            return fail("the name is longer than 4000 bytes");
        }
        if name.starts_with('/') {
            return fail("absolute paths are not allowed; use a name relative to /workspace");
        }
        if name.contains('\\') {
            return fail("backslashes are not allowed; use '/' between directories");
        }
        if name.chars().any(char::is_control) {
            return fail("control characters (NUL, newline, ...) are not allowed");
        }
        for component in name.split('/') {
            match component {
                "" => return fail("empty path component ('//' or a trailing '/')"),
                "." | ".." => return fail("'.' and '..' components are not allowed"),
                c if c.len() > MAX_COMPONENT_BYTES => return fail("a path component is longer than 255 bytes"),
                _ => {}
            }
        }
        Ok(Self(name.to_owned()))
    }

    /// The path as a string, e.g. `out/plot.png`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The components from the top, e.g. `["out", "plot.png"]`.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }
}

impl std::fmt::Display for WorkspacePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests;
