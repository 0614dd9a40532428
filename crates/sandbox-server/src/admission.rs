//! Admission control: at most `slots` executions at once and at most `queue_max` waiting;
//! past that, `queue_full` (429 with Retry-After).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Concurrency limit plus a bounded queue.
#[derive(Debug)]
pub struct Admission {
    slots: Arc<Semaphore>,
    slots_total: u32,
    waiting: AtomicU32,
    queue_max: u32,
}

/// A queue that is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueFull;

impl Admission {
    /// `slots` concurrent executions (at least 1) and `queue_max` waiting requests.
    pub fn new(slots: u32, queue_max: u32) -> Self {
        let slots = slots.max(1);
        Self { slots: Arc::new(Semaphore::new(slots as usize)), slots_total: slots, waiting: AtomicU32::new(0), queue_max }
    }

    /// Waits for a slot, or fails at once when the queue is full.
    /// Errors: [`QueueFull`].
    pub async fn acquire(&self) -> Result<OwnedSemaphorePermit, QueueFull> {
        if let Ok(p) = self.slots.clone().try_acquire_owned() {
            return Ok(p);
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.queue_max {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(QueueFull);
        }
        let permit = self.slots.clone().acquire_owned().await.map_err(|_| QueueFull);
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        permit
    }

    /// Executions running now.
    pub fn in_flight(&self) -> u32 {
        self.slots_total - u32::try_from(self.slots.available_permits()).unwrap_or(0)
    }

    /// Requests waiting for a slot now.
    pub fn queued(&self) -> u32 {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Total slots.
    pub fn slots(&self) -> u32 {
        self.slots_total
    }
}
