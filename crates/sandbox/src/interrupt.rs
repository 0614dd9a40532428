//! SIGINT and SIGTERM for commands that run sandboxes among other work: `env install`'s steps
//! that run package code (and `run --install`'s install), `env verify`'s import checks,
//! `doctor`'s readiness self-test.
//!
//! Without this, a Ctrl-C there killed the command at once and left the sandbox that ran (its
//! cgroups, mounts, directory and an unfinished audit record) for the next start's recovery to
//! sweep. Once [`arm`]ed, the first SIGINT or SIGTERM ends the sandboxes that run now (each is
//! killed, torn down and recorded, as `sandbox run` ends its own) and the command exits
//! 128+signal once the work it was in has unwound ([`exit_if_interrupted`]); with none
//! running it exits at once, as the signal's default action would (a uv or npm child in the
//! terminal's process group gets the Ctrl-C itself). A second signal exits at once.
//!
//! tokio keeps a signal's handler for the process's life once it took the signal over, so the
//! streams are made once, on a thread of their own; a command that goes on to make its own
//! streams (`sandbox run`) takes the handling over ([`hand_over`]).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, Once};

use sandbox_engine::Engine;

/// What a signal waits for before the command exits: engines with an execution running now
/// (each registered by a [`Running`] guard; their executions are ended at once), and holds
/// ([`hold`]: short work that ends by itself and must not be cut short).
struct Busy {
    engines: Vec<Arc<Engine>>,
    holds: usize,
}

static BUSY: Mutex<Busy> = Mutex::new(Busy { engines: Vec::new(), holds: 0 });
/// The first signal received (0: none).
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);
/// Set by [`hand_over`]: the signals are another stream's to handle.
static HANDED_OVER: AtomicBool = AtomicBool::new(false);
static ARMED: Once = Once::new();

/// Makes the SIGINT and SIGTERM handling described above, once per process; a no-op if the
/// streams cannot be made (the signals then act as they would).
pub fn arm() {
    ARMED.call_once(|| {
        // The streams are made on the thread that listens to them (were they made here and
        // that thread not started, tokio's handler, which stays, would swallow the signals);
        // this returns once they exist, so that a signal from then on is handled.
        let (made, streams_made) = std::sync::mpsc::channel::<()>();
        let spawned = std::thread::Builder::new().name("signals".into()).spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            let mut signals = crate::run::signal_streams_unowned(&rt);
            let _ = made.send(());
            if signals.is_none() {
                return;
            }
            rt.block_on(async {
                loop {
                    let sig = crate::run::interruption(&mut signals).await;
                    if !HANDED_OVER.load(Ordering::SeqCst) {
                        received(sig);
                    }
                }
            })
        });
        if spawned.is_ok() {
            // An error: the thread ended without streams (the signals act as they would).
            let _ = streams_made.recv();
        }
    });
}

/// What a signal does while armed (see the module's documentation).
fn received(sig: i32) {
    let name = crate::run::signal_name(sig);
    if INTERRUPTED.swap(sig, Ordering::SeqCst) != 0 {
        errln!("sandbox: interrupted again by {name}: exiting at once; the next start sweeps what this one left");
        std::process::exit(128 + sig);
    }
    let busy = BUSY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if busy.engines.is_empty() && busy.holds == 0 {
        errln!("sandbox: interrupted by {name}");
        std::process::exit(128 + sig);
    }
    errln!("sandbox: {name}: ending what runs, then exiting");
    for engine in &busy.engines {
        engine.abort_all();
    }
}

/// From now on the signals are the caller's own streams' to handle (made before this call,
/// so that none is lost between the two); the handling above stops.
pub fn hand_over() {
    HANDED_OVER.store(true, Ordering::SeqCst);
}

/// The first SIGINT or SIGTERM received while armed, as its number.
pub fn interrupted() -> Option<i32> {
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// Exits 128+signal if a signal was received while armed, after printing `failure` (the error
/// the interrupted work ended with, naming the execution it ended) as `main` would have.
pub fn exit_if_interrupted(failure: Option<&anyhow::Error>) {
    if let Some(sig) = interrupted() {
        if let Some(e) = failure {
            errln!("sandbox: error: {e:#}");
        }
        errln!("sandbox: interrupted by {}: what ran was ended and removed", crate::run::signal_name(sig));
        std::process::exit(128 + sig);
    }
}

/// Registers `engine` as running an execution until the guard drops: a signal meanwhile ends
/// its executions ([`Engine::abort_all`], which also ends at once any started later).
/// Errors: the signal already received, as its number (start nothing).
pub fn running(engine: &Arc<Engine>) -> Result<Running, i32> {
    let mut busy = BUSY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // Checked under the lock the handler takes: a signal either came before (refused here) or
    // finds this engine registered.
    if let Some(sig) = interrupted() {
        return Err(sig);
    }
    busy.engines.push(engine.clone());
    Ok(Running(engine.clone()))
}

/// An engine registered by [`running`]; unregistered on drop.
pub struct Running(Arc<Engine>);

impl Drop for Running {
    fn drop(&mut self) {
        let mut busy = BUSY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = busy.engines.iter().position(|e| Arc::ptr_eq(e, &self.0)) {
            busy.engines.swap_remove(i);
        }
    }
}

/// Holds the exit a signal would make until the guard drops (the caller then calls
/// [`exit_if_interrupted`]): for short work that makes host state and removes it itself, such
/// as the readiness self-test's sandbox. Errors: the signal already received, as its number.
pub fn hold() -> Result<Hold, i32> {
    let mut busy = BUSY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(sig) = interrupted() {
        return Err(sig);
    }
    busy.holds += 1;
    Ok(Hold(()))
}

/// A hold taken by [`hold`]; released on drop.
pub struct Hold(());

impl Drop for Hold {
    fn drop(&mut self) {
        BUSY.lock().unwrap_or_else(std::sync::PoisonError::into_inner).holds -= 1;
    }
}
