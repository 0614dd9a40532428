//! Structured mutation of a real image (a poor man's fuzzer that runs with the tests): header
//! fields of the three-layer image's tars (names, types, link names, modes) are rewritten with
//! hostile values, checksums fixed so the entries are read, the layout re-stored with matching
//! digests and imported. Any outcome but a panic is fine; a success must hold the invariants
//! (no device, no setuid or setgid bit, no link climbing out, nothing outside the destination),
//! a failure must leave nothing behind (`Scratch::import`).

use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use sandbox_oci::ImportOptions;

use crate::writer::{Layer, Writer};
use crate::Scratch;

const NAMES: &[&str] = &[
    "etc",
    "etc/",
    "etc/passwd",
    "../x",
    "a/../../x",
    "/",
    "./",
    ".",
    "..",
    "etc/.wh.passwd",
    "etc/.wh..wh..opq",
    ".wh..wh..opq",
    ".wh.etc",
    ".wh...",
    "opt/sub",
    "opt/sub/deep.txt",
    "data/linked",
    "data/hard",
    "usr/bin/python3/x",
    "lib/x",
    "lib",
    "usr/bin/up/y",
    "run/ctl/z",
    "//etc//passwd",
    "tmp/",
];
/// `VICTIM` stands for an absolute path to a host directory (a scratch one: should the unpacker
/// ever follow a link, this test writes there, and says so, rather than into the host's `/`).
const TARGETS: &[&str] =
    &["VICTIM", "..", "../..", "VICTIM/passwd", "etc/passwd", "data/linked", "usr", "usr/lib", "/../x", "opt", "", "run/ctl", "tmp", "lib/../.."];
const TYPES: &[u8] = b"0125634LKgS7\0";
/// Imports per test run (each writes and removes a small tree on tmpfs).
const SEEDS: u64 = 500;

/// xorshift64*: deterministic, so a failure replays with its seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).expect("below n")
    }
}

fn header_offsets(tar: &[u8]) -> Vec<usize> {
    let mut archive = tar::Archive::new(tar);
    archive.entries().expect("entries").map(|e| usize::try_from(e.expect("entry").raw_header_position()).expect("small")).collect()
}

fn set(block: &mut [u8], range: std::ops::Range<usize>, value: &[u8]) {
    let field = &mut block[range];
    field.fill(0);
    let n = value.len().min(field.len() - 1);
    field[..n].copy_from_slice(&value[..n]);
}

fn mutate(rng: &mut Rng, tar: &mut [u8], victim: &str) {
    let offsets = header_offsets(tar);
    for _ in 0..1 + rng.below(3) {
        let at = offsets[rng.below(offsets.len())];
        let block = &mut tar[at..at + 512];
        match rng.below(5) {
            0 => set(block, 0..100, NAMES[rng.below(NAMES.len())].as_bytes()),
            1 => block[156] = TYPES[rng.below(TYPES.len())],
            2 => set(block, 157..257, TARGETS[rng.below(TARGETS.len())].replace("VICTIM", victim).as_bytes()),
            3 => set(block, 100..108, format!("{:07o}", rng.next() & 0o7777).as_bytes()),
            // The classic: a directory of the image turned into a link out of it.
            _ => {
                block[156] = b'2';
                set(block, 157..257, TARGETS[rng.below(4)].replace("VICTIM", victim).as_bytes());
            }
        }
        // The checksum: the header's bytes summed with its own field as spaces.
        block[148..156].fill(b' ');
        let sum: u32 = block.iter().map(|&b| u32::from(b)).sum();
        set(block, 148..156, format!("{sum:06o}\0").as_bytes());
    }
}

/// Whether `target` at `depth` below the root climbs above it (the crate's rule, restated).
fn escapes(depth: usize, target: &str) -> bool {
    let mut depth = if target.starts_with('/') { 0 } else { depth as i64 };
    for comp in target.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

fn check_invariants(dir: &Path, depth: usize) {
    for entry in fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("entry").path();
        let meta = fs::symlink_metadata(&path).expect("lstat");
        let kind = meta.file_type();
        assert!(!kind.is_char_device() && !kind.is_block_device(), "{path:?}: a device");
        assert_eq!(meta.permissions().mode() & 0o6000, 0, "{path:?}: setuid or setgid");
        if kind.is_symlink() {
            let target = fs::read_link(&path).expect("readlink");
            assert!(!escapes(depth, &target.to_string_lossy()), "{path:?} -> {target:?} climbs out");
        } else if kind.is_dir() {
            check_invariants(&path, depth + 1);
        }
    }
}

#[test]
fn mutated_headers_never_panic_and_never_break_the_invariants() {
    let originals: Vec<Vec<u8>> = crate::import::three_layers().iter().map(Layer::tar_bytes).collect();
    let (mut ok, mut refused) = (0, 0);
    for seed in 1..=SEEDS {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut tars = originals.clone();
        let scratch = Scratch::in_memory();
        let victim = scratch.dir.path().join("victim");
        fs::create_dir(&victim).expect("victim");
        let which = rng.below(tars.len());
        mutate(&mut rng, &mut tars[which], victim.to_str().expect("utf-8"));
        let layers: Vec<Layer> = tars.into_iter().map(Layer::raw_tar).collect();
        Writer::single(&scratch.layout(), &layers);
        match scratch.import(&scratch.layout(), &ImportOptions::default()) {
            Ok(_) => {
                ok += 1;
                check_invariants(&scratch.dest(), 0);
            }
            Err(_) => refused += 1,
        }
        assert_eq!(fs::read_dir(&victim).expect("victim").count(), 0, "seed {seed}");
    }
    // Both outcomes must occur, or the mutations test nothing.
    assert!(ok > 20 && refused > 20, "{ok} imported, {refused} refused");
    assert!(ok + refused == SEEDS);
}
