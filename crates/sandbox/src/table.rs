//! The CLI's tables (`profiles list`, `env list`, `audit list`): every column as wide as its
//! widest value, so a long value never shifts the columns after it. On a terminal, a long cell
//! wraps inside its column (at [`TERMINAL_CELL_MAX`] characters); into a pipe, each row stays
//! one line with every value whole, for `grep`, `cut` and `awk`.

use comfy_table::{ColumnConstraint, ContentArrangement, Table, Width};

/// Widest a cell grows on a terminal before it wraps, in characters.
pub const TERMINAL_CELL_MAX: u16 = 48;

/// A table with `header`, plain (no borders; two spaces between columns).
pub fn new(header: &[&str]) -> Table {
    let mut t = Table::new();
    // Only the column gaps: no borders, no lines (comfy-table's "NOTHING" preset, then the gap).
    t.load_preset(comfy_table::presets::NOTHING);
    t.set_content_arrangement(ContentArrangement::Disabled);
    t.set_header(header.iter().copied());
    for c in t.column_iter_mut() {
        c.set_padding((0, 2));
    }
    t
}

/// Prints `table`, its cells capped at [`TERMINAL_CELL_MAX`] when stdout is a terminal, with
/// no trailing spaces.
pub fn print(mut table: Table) {
    let columns = table.column_count();
    for i in 0..columns {
        if let Some(c) = table.column_mut(i) {
            if i + 1 == columns {
                c.set_padding((0, 0));
            }
            if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
                c.set_constraint(ColumnConstraint::UpperBoundary(Width::Fixed(TERMINAL_CELL_MAX)));
            }
        }
    }
    // The preset draws its (blank) border and header lines with spaces: leave them out.
    for line in table.lines().map(|l| l.trim_end().to_owned()).filter(|l| !l.is_empty()) {
        outln!("{line}");
    }
}
