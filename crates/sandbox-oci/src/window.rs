//! A reader whose reads stop at a limit the caller moves as it goes: the tar reader buffers
//! an entry's long names and PAX records whole, so each entry's headers get a window of
//! their own ([`HEADER_BYTES`]) and file contents the rest of the stream's budget.

use std::cell::Cell;
use std::io::{self, Read, Seek, SeekFrom};
use std::rc::Rc;

/// Bytes the headers of one tar entry may take (its header blocks, GNU long name and long
/// link records, PAX records), on top of skipping the previous entry's data.
pub(crate) const HEADER_BYTES: u64 = 1 << 20;

/// The position and limit of a [`Window`], shared with whoever moves the limit.
#[derive(Clone, Default)]
pub(crate) struct Gauge {
    pos: Rc<Cell<u64>>,
    limit: Rc<Cell<u64>>,
    hit: Rc<Cell<Option<u64>>>,
}

impl Gauge {
    pub(crate) fn new(limit: u64) -> Self {
        let gauge = Self::default();
        gauge.limit.set(limit);
        gauge
    }

    /// Bytes read (or sought) so far.
    pub(crate) fn pos(&self) -> u64 {
        self.pos.get()
    }

    pub(crate) fn set_limit(&self, limit: u64) {
        self.limit.set(limit);
    }

    /// Opens a window for the next entry's headers: the rest of the previous entry's data
    /// (`previous_size` bytes, padded to tar's 512-byte blocks) and [`HEADER_BYTES`], within
    /// `ceiling`.
    pub(crate) fn window_for_headers(&self, previous_size: u64, ceiling: u64) {
        let padded = previous_size.div_ceil(512).saturating_mul(512);
        self.limit.set(ceiling.min(self.pos().saturating_add(padded).saturating_add(HEADER_BYTES)));
    }

    /// The limit a read ran into, if one did.
    pub(crate) fn hit(&self) -> Option<u64> {
        self.hit.get()
    }
}

/// Reads `inner` up to the [`Gauge`]'s limit; a read past it fails.
pub(crate) struct Window<R> {
    inner: R,
    gauge: Gauge,
}

impl<R> Window<R> {
    pub(crate) fn new(inner: R, gauge: &Gauge) -> Self {
        Self { inner, gauge: gauge.clone() }
    }
}

impl<R: Read> Read for Window<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (pos, limit) = (self.gauge.pos.get(), self.gauge.limit.get());
        if buf.is_empty() {
            return Ok(0);
        }
        if pos >= limit {
            self.gauge.hit.set(Some(limit));
            return Err(io::Error::other("tar stream over its limit"));
        }
        let cap = usize::try_from(limit - pos).unwrap_or(usize::MAX).min(buf.len());
        let n = self.inner.read(&mut buf[..cap])?;
        self.gauge.pos.set(pos + n as u64);
        Ok(n)
    }
}

impl<R: Seek> Seek for Window<R> {
    fn seek(&mut self, from: SeekFrom) -> io::Result<u64> {
        let pos = self.inner.seek(from)?;
        self.gauge.pos.set(pos);
        Ok(pos)
    }
}
