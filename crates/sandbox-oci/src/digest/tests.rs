use super::{Digest, Verifying};
use crate::ImportError;

/// Reads `content` as the blob `digest` of `declared` bytes, to the end, then finishes.
#[track_caller]
fn check(content: &[u8], digest: &Digest, declared: u64) -> Result<(), ImportError> {
    let mut blob = Verifying::new(content, digest, declared);
    let _ = std::io::copy(&mut blob, &mut std::io::sink());
    blob.finish()
}

#[test]
fn a_blob_passes_only_with_its_size_and_digest() {
    let good = Digest::of(b"hello");
    assert!(check(b"hello", &good, 5).is_ok());
    assert!(matches!(check(b"hello!", &good, 5), Err(ImportError::SizeMismatch { declared: 5, .. })));
    assert!(matches!(check(b"hell", &good, 5), Err(ImportError::SizeMismatch { declared: 5, .. })));
    assert!(matches!(check(b"jello", &good, 5), Err(ImportError::DigestMismatch { .. })));
}

#[test]
fn a_longer_blob_never_delivers_a_byte_past_its_size() {
    let digest = Digest::of(b"abc");
    let mut blob = Verifying::new(&b"abcdef"[..], &digest, 3);
    let mut out = Vec::new();
    assert!(std::io::Read::read_to_end(&mut blob, &mut out).is_err());
    assert!(out.len() <= 3, "{out:?}");
    assert!(blob.oversized());
}

#[test]
fn only_sha256_digests_in_canonical_form_parse() {
    let hex = "a".repeat(64);
    assert!(Digest::parse(&format!("sha256:{hex}")).is_ok());
    for bad in [
        format!("sha512:{hex}"),
        format!("sha256:{}", "A".repeat(64)),
        format!("sha256:{}", &hex[1..]),
        format!("sha256:../{}", &hex[3..]),
        hex.clone(),
        String::new(),
    ] {
        assert!(matches!(Digest::parse(&bad), Err(ImportError::BadDigest { .. })), "{bad:?}");
    }
}
