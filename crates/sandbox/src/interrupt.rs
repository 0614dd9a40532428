//! SIGINT and SIGTERM for commands that run sandboxes among other work: `env install`'s steps
//! that run package code (and `run --install`'s install), `env verify`'s import checks,
//! `doctor`'s readiness self-test.
//!
//! Without this, a Ctrl-C there killed the command at once and left the sandbox that ran (its
//! cgroups, mounts, directory and an unfinished audit record) for the next start's recovery to
//! sweep. Once [`arm`]ed, the first SIGINT or SIGTERM ends the sandboxes that run now (each is
//! killed, torn down and recorded, as `sandbox run` ends its own), or waits for a [`hold`]'s
//! short work to clean up after itself, and the command ends by the signal once the work it was
//! in has unwound ([`exit_if_interrupted`]). With nothing running it ends at once, where the
//! signal's default action would have ended it (a uv or npm child in the terminal's process
//! group gets the Ctrl-C itself). A second signal ends it at once. It ends by the signal itself
//! ([`die`]), as every interrupted command does: a shell sees 128+signal and stops the script.
//!
//! tokio keeps a signal's handler for the process's life once it took the signal over, and a
//! stream made later does not see a signal that came before it. So the streams are made once,
//! on a thread of their own, and a command that goes on to wait for the signals itself
//! (`sandbox run` after `run --install`'s install, `doctor`'s warm check) takes them over from
//! that thread ([`hand_over`]): from then on each is forwarded to it, and none falls between.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, Once};

use sandbox_engine::Engine;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// What a signal waits for before the command exits: engines with an execution running now
/// (each registered by a [`Running`] guard; their executions are ended at once), and holds
/// ([`hold`]: short work that ends by itself and must not be cut short), by what they hold for.
struct Busy {
    engines: Vec<Arc<Engine>>,
    holds: Vec<&'static str>,
}

static BUSY: Mutex<Busy> = Mutex::new(Busy { engines: Vec::new(), holds: Vec::new() });
/// The first signal received while the handling was this module's (0: none).
static INTERRUPTED: AtomicI32 = AtomicI32::new(0);
/// Where the signals go once handed over ([`hand_over`]); `None`: handled here.
static FORWARD: Mutex<Option<UnboundedSender<i32>>> = Mutex::new(None);
/// Whether a signal was forwarded to a taker ([`hand_over`]): one that comes after the taker
/// stopped listening is then a second one.
static FORWARDED: AtomicBool = AtomicBool::new(false);
/// Whether the thread listens (its streams were made).
static LISTENING: AtomicBool = AtomicBool::new(false);
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
            LISTENING.store(signals.is_some(), Ordering::SeqCst);
            let _ = made.send(());
            if signals.is_none() {
                return;
            }
            rt.block_on(async {
                loop {
                    let sig = crate::run::interruption(&mut signals).await;
                    // Handed over: forwarded, unless the taker has stopped listening (then
                    // handled here, rather than swallowed).
                    let forward = FORWARD.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                    match forward.map(|to| to.send(sig)) {
                        Some(Ok(())) => FORWARDED.store(true, Ordering::SeqCst),
                        _ => received(sig),
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

/// What a signal does while the handling is this module's (see the module's documentation).
fn received(sig: i32) {
    let name = crate::run::signal_name(sig);
    if INTERRUPTED.swap(sig, Ordering::SeqCst) != 0 || FORWARDED.load(Ordering::SeqCst) {
        errln!("sandbox: interrupted again by {name}: exiting at once; the next start sweeps what this one left");
        die(sig);
    }
    // What runs, decided under the lock [`running`] and [`hold`] take (each checks for a signal
    // there, so what registers after this sees it); acted on and said after it.
    let (engines, holds) = {
        let busy = BUSY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (busy.engines.clone(), busy.holds.clone())
    };
    if engines.is_empty() && holds.is_empty() {
        errln!("sandbox: interrupted by {name}");
        die(sig);
    }
    for engine in &engines {
        engine.abort_all();
    }
    if engines.is_empty() {
        errln!("sandbox: {name}: exiting once {} ends", holds.join(" and "));
    } else {
        errln!("sandbox: {name}: ending the sandbox that runs, then exiting");
    }
}

/// Hands the signals over to the caller, from now on, if this module's thread listens: each is
/// then sent on the returned channel (a signal that came before was handled here). `None`:
/// nothing was armed; the caller makes its own streams.
pub fn hand_over() -> Option<UnboundedReceiver<i32>> {
    if !LISTENING.load(Ordering::SeqCst) {
        return None;
    }
    let (to, from) = unbounded_channel();
    *FORWARD.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(to);
    Some(from)
}

/// The first SIGINT or SIGTERM received while armed and not handed over, as its number.
pub fn interrupted() -> Option<i32> {
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// Ends the process by the signal ([`die`]) if one was received while armed, after printing `failure` (the error
/// the interrupted work ended with, naming the execution it ended) as `main` would have, and
/// `outcome` (what became of the work: "nothing was installed").
pub fn exit_if_interrupted(failure: Option<&anyhow::Error>, outcome: &str) {
    if let Some(sig) = interrupted() {
        if let Some(e) = failure {
            errln!("sandbox: error: {e:#}");
        }
        errln!("sandbox: interrupted by {}: {outcome}", crate::run::signal_name(sig));
        die(sig);
    }
}

/// Ends the process by `sig` now ([`sandbox_runtime::die_by_signal`]: a shell sees 128+`sig`
/// and stops a script running the command, as after the signal's default action).
pub fn die(sig: i32) -> ! {
    sandbox_runtime::die_by_signal(sig)
}

/// The signal `main` ends the process by once the command returned ([`end_by`]); 0: none.
static END_BY: AtomicI32 = AtomicI32::new(0);

/// For a command interrupted by `sig` that returns after its clean-up, so that what it holds is
/// dropped as usual: `main` then ends the process by the signal ([`ending`]). Returns
/// 128+`sig`, the exit code should the signal not end it.
pub fn end_by(sig: i32) -> std::process::ExitCode {
    END_BY.store(sig, Ordering::SeqCst);
    std::process::ExitCode::from(u8::try_from(128 + sig).unwrap_or(1))
}

/// `code`, unless a command asked to end by a signal ([`end_by`]): then the process ends by it.
pub fn ending(code: std::process::ExitCode) -> std::process::ExitCode {
    match END_BY.load(Ordering::SeqCst) {
        0 => code,
        sig => die(sig),
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
/// as the readiness self-test's sandbox. `what` names it ("the self-test") in the message a
/// signal prints. Errors: the signal already received, as its number.
pub fn hold(what: &'static str) -> Result<Hold, i32> {
    let mut busy = BUSY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(sig) = interrupted() {
        return Err(sig);
    }
    busy.holds.push(what);
    Ok(Hold(what))
}

/// A hold taken by [`hold`]; released on drop.
pub struct Hold(&'static str);

impl Drop for Hold {
    fn drop(&mut self) {
        let mut busy = BUSY.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(i) = busy.holds.iter().position(|w| *w == self.0) {
            busy.holds.swap_remove(i);
        }
    }
}
