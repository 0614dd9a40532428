//! The shared library a Python template loads with ctypes: it exports the runtime's
//! warm-start entry point, `sandbox_warm_enter`, defined (with its unsafe FFI attribute) in
//! `sandbox_runtime::sys::warm`.

pub use sandbox_runtime::warm_entry;
