//! The CLI's standard output and error: a reader that goes away (`sandbox profiles list | head -1`)
//! ends the program quietly, as it ends a Unix filter, instead of a panic on the broken pipe.

use std::fmt;
use std::io::{self, Write as _};

/// `println!` for the CLI's output; see [`write()`].
macro_rules! outln {
    ($($arg:tt)*) => { $crate::out::write(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` for the CLI's output; see [`write()`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::out::write(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics: a closed stderr loses the message, nothing else.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::out::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Writes `args` to stdout and flushes. When the reader has gone (EPIPE) the process exits 0 at
/// once, as `head` expects of a filter; any other write error (a full disk) exits 1 with a message.
pub fn write(args: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        stdout_failed(&e);
    }
}

/// Writes `args` to stderr, ignoring errors (there is nowhere left to report them).
pub fn write_err(args: fmt::Arguments<'_>) {
    let _ = io::stderr().lock().write_fmt(args);
}

/// Ends the process after a failed write to stdout: exit 0 for a reader that went away, else 1.
pub fn stdout_failed(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    write_err(format_args!("sandbox: error: cannot write to standard output: {e}\n"));
    std::process::exit(1)
}
