//! `sandbox run --out-dir`: writes the program's output files into a host directory without
//! letting the program choose where (issue 12, finding 4). The CLI runs as root and the names
//! are the program's, so:
//!
//! - every path is opened relative to the out dir's descriptor with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS)`: no symlink (already in the directory, or raced in) is followed and
//!   nothing lands outside; the out dir itself must not be a symlink (`O_NOFOLLOW`);
//! - hidden names (any component starting with `.`) are never written: `.git/config`,
//!   `.bashrc` or `.npmrc` are run by host tools later;
//! - an existing file is never replaced unless `--overwrite`; then the new file is written
//!   under a temporary name and renamed over the old entry, so a hard link is never written
//!   through;
//! - files and directories written get the owner and group of the out dir (its invoking user,
//!   not root); an out dir the CLI creates is given to `SUDO_UID`/`SUDO_GID` when run through
//!   sudo, else it stays root's.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use anyhow::Context as _;
use base64::Engine as _;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid};
use sandbox_core::WorkspacePath;

/// Writes `files` under `dir`; a file that cannot be written is reported on stderr and
/// skipped. Errors: the out dir cannot be created or opened (or is a symlink).
pub fn write(dir: &Path, files: &BTreeMap<String, sandbox_core::wire::OutputFile>, overwrite: bool) -> anyhow::Result<()> {
    let existed = dir.exists();
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let root = nix::fcntl::open(dir, OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY, Mode::empty())
        .with_context(|| format!("cannot open {} (a symlink is refused)", dir.display()))?;
    if !existed {
        if let Some(owner) = sudo_user() {
            chown(&root, owner).with_context(|| format!("cannot give {} to the invoking user", dir.display()))?;
        }
    }
    let st = nix::sys::stat::fstat(&root)?;
    let owner = (Uid::from_raw(st.st_uid), Gid::from_raw(st.st_gid));
    for (name, f) in files {
        if let Err(e) = write_one(&root, owner, name, &f.base64, overwrite) {
            errln!("sandbox: output file {} not written: {e:#}", name.escape_debug());
        }
    }
    Ok(())
}

fn write_one(root: &OwnedFd, owner: (Uid, Gid), name: &str, base64: &str, overwrite: bool) -> anyhow::Result<()> {
    let rel = WorkspacePath::parse(name)?;
    let comps: Vec<&str> = rel.components().collect();
    if let Some(c) = comps.iter().find(|c| c.starts_with('.')) {
        anyhow::bail!("hidden name {c:?} refused (host tools read dot-files)");
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(base64)?;
    let (leaf, parents) = comps.split_last().expect("a workspace path has a component");
    // Descend one directory at a time, each opened beneath the previous without symlinks.
    let mut at: OwnedFd = root.try_clone()?;
    for c in parents {
        match nix::sys::stat::mkdirat(&at, *c, Mode::from_bits_truncate(0o755)) {
            Ok(()) => {
                let d = open_beneath(&at, c, OFlag::O_DIRECTORY | OFlag::O_RDONLY, 0)?;
                chown(&d, owner)?;
                at = d;
            }
            Err(nix::errno::Errno::EEXIST) => at = open_beneath(&at, c, OFlag::O_DIRECTORY | OFlag::O_RDONLY, 0)?,
            Err(e) => return Err(e).with_context(|| format!("cannot create directory {c:?}")),
        }
    }
    let create = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL;
    if !overwrite {
        let file = open_beneath(&at, leaf, create, 0o644).map_err(|e| match e.downcast_ref::<nix::errno::Errno>() {
            Some(nix::errno::Errno::EEXIST) => anyhow::anyhow!("{name} exists (pass --overwrite to replace it)"),
            _ => e,
        })?;
        return fill(file, owner, &bytes);
    }
    // Write beside it, then replace the directory entry: an existing hard link or symlink is
    // replaced, never written through.
    let tmp = format!(".{leaf}.sandbox-{}", std::process::id());
    let file = open_beneath(&at, &tmp, create, 0o644)?;
    let filled = fill(file, owner, &bytes).and_then(|()| Ok(nix::fcntl::renameat(&at, tmp.as_str(), &at, *leaf)?));
    if filled.is_err() {
        let _ = nix::unistd::unlinkat(&at, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
    }
    filled
}

fn fill(file: OwnedFd, owner: (Uid, Gid), bytes: &[u8]) -> anyhow::Result<()> {
    chown(&file, owner)?;
    std::fs::File::from(file).write_all(bytes)?;
    Ok(())
}

/// `openat2(dir, name, flags | O_CLOEXEC, mode)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`
/// (which covers the last component too). Errors: the errno (`ELOOP` for a symlink, `EXDEV`
/// for an escape).
fn open_beneath(dir: &OwnedFd, name: &str, flags: OFlag, mode: u32) -> anyhow::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .mode(Mode::from_bits_truncate(mode))
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    Ok(openat2(dir.as_fd(), name, how)?)
}

fn chown(fd: &OwnedFd, (uid, gid): (Uid, Gid)) -> anyhow::Result<()> {
    Ok(nix::unistd::fchown(fd, Some(uid), Some(gid))?)
}

/// The user who ran `sudo sandbox run`, from `SUDO_UID` and `SUDO_GID` (both must parse).
fn sudo_user() -> Option<(Uid, Gid)> {
    let id = |k: &str| std::env::var(k).ok()?.parse::<u32>().ok();
    Some((Uid::from_raw(id("SUDO_UID")?), Gid::from_raw(id("SUDO_GID")?)))
}
