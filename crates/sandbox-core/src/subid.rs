//! Subordinate id files (`/etc/subuid`, `/etc/subgid`, shadow-utils' `subuid(5)` format
//! `owner:start:count`): which ranges delegated to local users overlap the host ids the
//! sandboxes run as. The caller reads the file; this module only parses text.

use std::ops::Range;

/// How many host ids from `uid_base` the sandboxes may use (uids and gids alike): the 65536
/// ids a user namespace's root can name, of which root, the program's gid and one uid per
/// running execution are mapped.
pub const UID_RANGE: u64 = 65_536;

/// One line of a subordinate id file that overlaps the sandboxes' ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// 1-based line number.
    pub line: usize,
    /// The user (name or numeric uid) the range is delegated to.
    pub owner: String,
    /// The delegated ids, `start..start + count`.
    pub range: Range<u64>,
}

impl std::fmt::Display for Overlap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {} owns {}..{}", self.line, self.owner, self.range.start, self.range.end)
    }
}

/// The lines of `text` (a subuid/subgid file) whose range overlaps `ids`. Blank lines,
/// `#` comments and lines that are not `owner:start:count` (which shadow-utils ignores too)
/// are skipped.
pub fn overlaps(text: &str, ids: &Range<u64>) -> Vec<Overlap> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                return None;
            }
            let mut parts = line.split(':');
            let (owner, start, count) = (parts.next()?, parts.next()?.parse::<u64>().ok()?, parts.next()?.parse::<u64>().ok()?);
            if parts.next().is_some() || count == 0 {
                return None;
            }
            let range = start..start.saturating_add(count);
            (range.start < ids.end && ids.start < range.end).then(|| Overlap { line: i + 1, owner: owner.to_owned(), range })
        })
        .collect()
}

/// The host ids the sandboxes use with `uid_base`: `uid_base..uid_base + UID_RANGE`.
pub fn sandbox_ids(uid_base: u32) -> Range<u64> {
    let start = u64::from(uid_base);
    start..start + UID_RANGE
}

#[cfg(test)]
mod tests;
