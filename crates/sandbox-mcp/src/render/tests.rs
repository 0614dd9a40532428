//! Unit tests of result rendering.
