//! Output of the `tensorlane` tool: the one table/JSON printer, the table renderer, and progress
//! bars on stderr.

use std::io::Write as _;
use std::process::ExitCode;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

/// A report that prints as a table or as JSON (`--json`).
pub trait Table: Serialize {
    /// The report as an aligned, human-readable table.
    fn to_table(&self) -> String;
}

/// Prints `report` to stdout: pretty JSON (with a final newline) when `json`, else its table.
/// Exit 0, or 1 when it cannot be serialised or written. A closed pipe (`| head`) is not an
/// error.
pub fn print_report<R: Table + ?Sized>(report: &R, json: bool) -> ExitCode {
    let text = if json {
        match serde_json::to_string_pretty(report) {
            Ok(s) => s + "\n",
            Err(e) => {
                eprintln!("error: cannot serialise the report: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        report.to_table()
    };
    print(&text)
}

/// Writes `text` to stdout (see [`print_report`] for the exit codes).
pub fn print(text: &str) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(text.as_bytes()).and_then(|_| stdout.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write output: {e}");
            ExitCode::from(1)
        }
    }
}

/// Writes one line to stdout, like `println!`, but a closed pipe (`tensorlane offload plan … |
/// head -1`) ends the process quietly with exit 0 instead of a panic, and any other write error
/// ends it with exit 1 and a message.
pub fn write_line(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|_| stdout.write_all(b"\n")) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write output: {e}");
        std::process::exit(1);
    }
}

/// `println!` through [`write_line`]: every line the tool prints to stdout goes through it.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write_line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// `[2, 3]`.
pub fn shape_str(s: &[u64]) -> String {
    let inner: Vec<String> = s.iter().map(u64::to_string).collect();
    format!("[{}]", inner.join(", "))
}

/// `12 B`, `1.5 KiB`, ... `2.0 TiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A size as every human-readable line of the tool prints it: IEC units, with the exact count
/// from 1 KiB up (`286 B`, `11.6 KiB (11876 bytes)`). Table columns and JSON keep raw counts.
pub fn size(n: u64) -> String {
    if n < 1024 {
        human_bytes(n)
    } else {
        format!("{} ({n} bytes)", human_bytes(n))
    }
}

/// Renders `rows` as aligned text, one line per row, columns two spaces apart and padded to
/// their widest cell (in chars), right-aligned for the column indices in `right_aligned`, each
/// line's trailing spaces trimmed. Widths come from the rows as long as the first (the header);
/// a shorter row (a detail line) is written as is, its last cell spanning the rest of the line.
pub fn render_table(rows: &[Vec<String>], right_aligned: &[usize]) -> String {
    let mut out = String::new();
    let ncol = rows.first().map_or(0, Vec::len);
    let mut w = vec![0usize; ncol];
    for r in rows.iter().filter(|r| r.len() == ncol) {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                let pad = w[i].saturating_sub(c.chars().count());
                if right_aligned.contains(&i) {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                } else {
                    line.push_str(c);
                    line.push_str(&" ".repeat(pad));
                }
                line.push_str("  ");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Work of at least this many bytes draws a progress bar (on a terminal only).
pub const PROGRESS_THRESHOLD: u64 = 64 << 20;

/// A progress bar on stderr for `total` bytes, labelled `what`, or `None` when there is too
/// little to be worth drawing. indicatif draws nothing when stderr is not a terminal.
pub fn progress(total: u64, what: &str) -> Option<indicatif::ProgressBar> {
    if total < PROGRESS_THRESHOLD {
        return None;
    }
    let b = indicatif::ProgressBar::with_draw_target(Some(total), indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template(&format!(
        "{what} {{bar:40}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} eta {{eta}}"
    )) {
        b.set_style(style);
    }
    Some(b)
}

/// Advances `bar` (when there is one) by `n` bytes.
pub fn advance(bar: Option<&indicatif::ProgressBar>, n: u64) {
    if let Some(b) = bar {
        b.inc(n);
    }
}

/// Clears a finished bar.
pub fn finish(bar: Option<indicatif::ProgressBar>) {
    if let Some(b) = bar {
        b.finish_and_clear();
    }
}

/// Lowercase hex SHA-256 of `data`, hashed in 8 MiB chunks that advance `bar`.
pub fn sha256_hex(data: &[u8], bar: Option<&indicatif::ProgressBar>) -> String {
    let mut h = Sha256::new();
    for c in data.chunks(8 << 20) {
        h.update(c);
        advance(bar, c.len() as u64);
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_alignment_and_units() {
        let rows = vec![
            vec!["A".into(), "NUM".into(), "Z".into()],
            vec!["long".into(), "7".into(), "x".into()],
            vec!["  detail line".into()],
        ];
        assert_eq!(render_table(&rows, &[1]), "A     NUM  Z\nlong    7  x\n  detail line\n");
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(4 << 30), "4.0 GiB");
        assert_eq!(size(286), "286 B");
        assert_eq!(size(11876), "11.6 KiB (11876 bytes)");
        assert_eq!(shape_str(&[2, 3]), "[2, 3]");
        assert_eq!(shape_str(&[]), "[]");
    }
}
