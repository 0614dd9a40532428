//! Content addresses (`sha256:<64 hex>`) and the reader that checks a blob against one while it
//! streams (OCI image-spec descriptor.md, "Digests"; only the registered `sha256` algorithm).

use std::fmt;
use std::io::{self, Read};

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::ImportError;

#[cfg(test)]
mod tests;

/// A `sha256:` content address: the algorithm and 64 lowercase hex digits, nothing else
/// (OCI image-spec descriptor.md, "Digests" and "SHA-256"). Only [`Digest::parse`] makes one, so
/// a `Digest` is always safe to use as a file name under `blobs/sha256/`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

impl Digest {
    /// Parses `sha256:<64 lowercase hex>`.
    /// Errors: [`ImportError::BadDigest`] for any other algorithm, length or character.
    pub fn parse(value: &str) -> Result<Self, ImportError> {
        let hex = value.strip_prefix("sha256:").ok_or_else(|| ImportError::BadDigest { value: value.to_owned() })?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(ImportError::BadDigest { value: value.to_owned() });
        }
        Ok(Self(value.to_owned()))
    }

    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(format!("sha256:{}", hex::encode(Sha256::digest(bytes))))
    }

    /// The 64 hex digits: the blob's file name under `blobs/sha256/` (image-layout.md, "Blobs").
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }

    /// The whole digest, `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Digest {
    type Error = ImportError;
    fn try_from(value: String) -> Result<Self, ImportError> {
        Self::parse(&value)
    }
}

impl From<Digest> for String {
    fn from(digest: Digest) -> String {
        digest.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Reads a blob while hashing it; refuses to deliver a byte past the declared size.
/// [`Verifying::finish`] drains what is left and compares size and digest.
pub(crate) struct Verifying<R> {
    inner: R,
    want: Digest,
    declared: u64,
    seen: u64,
    hasher: Sha256,
    oversized: bool,
}

impl<R: Read> Verifying<R> {
    pub(crate) fn new(inner: R, want: &Digest, declared: u64) -> Self {
        Self { inner, want: want.clone(), declared, seen: 0, hasher: Sha256::new(), oversized: false }
    }

    /// Whether the blob turned out longer than its descriptor says (the read that found out
    /// failed; the caller reports [`ImportError::SizeMismatch`] rather than that read's error).
    pub(crate) fn oversized(&self) -> bool {
        self.oversized
    }

    /// Reads the rest of the blob, then checks its size and digest.
    /// Errors: [`ImportError::SizeMismatch`], [`ImportError::DigestMismatch`],
    /// [`ImportError::ReadBlob`].
    pub(crate) fn finish(mut self) -> Result<(), ImportError> {
        let drained = io::copy(&mut self, &mut io::sink());
        if self.oversized || (drained.is_ok() && self.seen != self.declared) {
            return Err(ImportError::SizeMismatch { digest: self.want, declared: self.declared });
        }
        drained.map_err(|source| ImportError::ReadBlob { digest: self.want.clone(), source })?;
        let actual = format!("sha256:{}", hex::encode(self.hasher.finalize()));
        if actual != self.want.as_str() {
            return Err(ImportError::DigestMismatch { digest: self.want, actual });
        }
        Ok(())
    }
}

impl<R: Read> Read for Verifying<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.oversized {
            return Err(io::Error::other("blob longer than its descriptor says"));
        }
        // Ask for one byte more than may remain, so a longer blob shows itself.
        let left = self.declared - self.seen;
        let cap = usize::try_from(left.saturating_add(1)).unwrap_or(usize::MAX).min(buf.len());
        let n = self.inner.read(&mut buf[..cap])?;
        let n_u64 = n as u64;
        if n_u64 > left {
            self.oversized = true;
            return Err(io::Error::other("blob longer than its descriptor says"));
        }
        self.seen += n_u64;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}
