//! Unit tests of the tool schemas.
