//! `zrpc-bench compare <a.md> <b.md>`: do two reports agree? Every ratio cell (`x1.23`, with or
//! without its `(min..max)` spread) of one report is matched with the cell at the same place in
//! the other (section, table caption with its numbers masked, row subject, column: so that a run
//! with other `--rounds` or sizes still lines up) and printed with both values and
//! their relative difference, PASS within the tolerance (10% by default), FAIL beyond it. This
//! is how "two full runs agree within 10% on the ratios" is shown; the exit status is non-zero
//! when a ratio fails or when the reports share no ratio at all.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};

/// Where a ratio sits in a report: (section, table caption, row subject, column header).
pub(crate) type Key = (String, String, String, String);

/// Every ratio cell of a report, by place (its value).
#[cfg(test)]
fn ratios(text: &str) -> BTreeMap<Key, f64> {
    ratio_cells(text)
        .into_iter()
        .filter_map(|(k, c)| Some((k, ratio_value(&c)?)))
        .collect()
}

/// Why a ratio cell is not held to the tolerance: the harness marked it `unstable: ...` (a
/// windowed figure whose two halves of one run disagree, see `report::windowed_ratio`).
fn unstable_reason(cell: &str) -> Option<&str> {
    cell.find("unstable").map(|i| cell[i..].trim())
}

/// Every ratio cell of a report, by place, as written.
fn ratio_cells(text: &str) -> BTreeMap<Key, String> {
    let mut out = BTreeMap::new();
    let mut section = String::new();
    let mut caption = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(t) = line.strip_prefix("## ") {
            section = t.trim().to_owned();
            caption.clear();
            continue;
        }
        if let Some(c) = line.strip_prefix("**").and_then(|l| l.strip_suffix("**")) {
            caption = mask_numbers(c);
            continue;
        }
        let is_header =
            line.starts_with('|') && lines.peek().is_some_and(|l| l.starts_with("|---"));
        if !is_header {
            continue;
        }
        let headers = cells(line);
        lines.next();
        while let Some(row) = lines.next_if(|l| l.starts_with('|')) {
            let c = cells(row);
            // The subject: the leading cells that are not figures ("pinned / bare tonic").
            let subject = c
                .iter()
                .take_while(|v| !is_figure(v))
                .cloned()
                .collect::<Vec<_>>()
                .join(" / ");
            for (h, v) in headers.iter().zip(&c) {
                if ratio_value(v).is_some() {
                    out.insert(
                        (section.clone(), caption.clone(), subject.clone(), h.clone()),
                        v.clone(),
                    );
                }
            }
        }
    }
    out
}

/// Every run of digits (and the separators inside it) becomes `#`: "median of 7 runs, 20000
/// requests" and "median of 3 runs, 4000 requests" are the same table.
fn mask_numbers(caption: &str) -> String {
    let mut out = String::with_capacity(caption.len());
    let mut chars = caption.chars().peekable();
    let mut prev = ' ';
    while let Some(c) = chars.next() {
        // Digits inside a word stay ("h2load").
        if c.is_ascii_digit() && !prev.is_alphanumeric() {
            while chars
                .next_if(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
                .is_some()
            {}
            out.push('#');
            prev = '#';
        } else {
            out.push(c);
            prev = c;
        }
    }
    out
}

/// `x1.23` or `x1.23 (1.10..1.30)` -> 1.23.
pub(crate) fn ratio_value(cell: &str) -> Option<f64> {
    let rest = cell.trim().strip_prefix('x')?;
    let num = rest.split_whitespace().next()?;
    num.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn is_figure(cell: &str) -> bool {
    let c = cell.trim();
    ratio_value(c).is_some()
        || c == "-"
        || c.starts_with("skipped")
        || c.trim_end_matches('%')
            .split_whitespace()
            .next()
            .is_some_and(|n| n.parse::<f64>().is_ok())
}

fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split(" | ").map(|c| c.trim().to_owned()).collect()
}

/// One compared ratio.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Line {
    pub(crate) key: Key,
    pub(crate) a: f64,
    pub(crate) b: f64,
    /// |a - b| / min(a, b): symmetric, so that the order of the reports does not matter.
    pub(crate) diff: f64,
    pub(crate) pass: bool,
    /// Not held to the tolerance: why (a report marked the cell unstable).
    pub(crate) excluded: Option<String>,
}

/// Compares the ratios two reports share; also returns the places only one of them has.
pub(crate) fn compare(a: &str, b: &str, tolerance: f64) -> (Vec<Line>, Vec<Key>) {
    let (ca, cb) = (ratio_cells(a), ratio_cells(b));
    let mut lines = Vec::new();
    let mut unmatched = Vec::new();
    for (k, cell_a) in &ca {
        match cb.get(k) {
            Some(cell_b) => {
                let (Some(va), Some(vb)) = (ratio_value(cell_a), ratio_value(cell_b)) else {
                    continue;
                };
                let diff = (va - vb).abs() / va.min(vb).max(1e-9);
                let excluded = match (unstable_reason(cell_a), unstable_reason(cell_b)) {
                    (Some(r), _) => Some(format!("A: {r}")),
                    (None, Some(r)) => Some(format!("B: {r}")),
                    (None, None) => None,
                };
                lines.push(Line {
                    key: k.clone(),
                    a: va,
                    b: vb,
                    diff,
                    pass: excluded.is_some() || diff <= tolerance,
                    excluded,
                });
            }
            None => unmatched.push(k.clone()),
        }
    }
    unmatched.extend(cb.keys().filter(|k| !ca.contains_key(*k)).cloned());
    (lines, unmatched)
}

/// The command: prints the comparison, fails when a ratio differs by more than `tolerance_pct`.
pub(crate) fn run(a: &Path, b: &Path, tolerance_pct: f64) -> Result<()> {
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .with_context(|| format!("cannot read the report {}", p.display()))
    };
    let (ta, tb) = (read(a)?, read(b)?);
    let (lines, unmatched) = compare(&ta, &tb, tolerance_pct / 100.0);
    if lines.is_empty() {
        bail!(
            "{} and {} share no ratio cell (`x1.23`): are both zrpc-bench reports of the same scenarios?",
            a.display(),
            b.display()
        );
    }
    println!(
        "A = {}\nB = {}\ntolerance {tolerance_pct}%\n",
        a.display(),
        b.display()
    );
    println!("| section | table | subject | ratio | A | B | difference | verdict |");
    println!("|---|---|---|---|---|---|---|---|");
    let mut failed = 0;
    let mut excluded = 0;
    for l in &lines {
        let (section, caption, subject, column) = &l.key;
        let caption: String = caption.chars().take(40).collect();
        let verdict = match &l.excluded {
            Some(why) => format!("EXCLUDED ({why})"),
            None if l.pass => "PASS".into(),
            None => "FAIL".into(),
        };
        println!(
            "| {section} | {caption} | {subject} | {column} | x{:.2} | x{:.2} | {:.1}% | {verdict} |",
            l.a,
            l.b,
            l.diff * 100.0,
        );
        failed += usize::from(!l.pass);
        excluded += usize::from(l.excluded.is_some());
    }
    for (section, _, subject, column) in &unmatched {
        println!("only in one report: {section} / {subject} / {column}");
    }
    println!(
        "\n{} of {} ratios agree within {tolerance_pct}%",
        lines.len() - failed - excluded,
        lines.len() - excluded
    );
    if excluded > 0 {
        println!(
            "{excluded} ratio(s) excluded: marked unstable by the harness (their two halves of \
             one run differ by more than 10%; the reason is in the table above)"
        );
    }
    if failed > 0 {
        bail!("{failed} ratio(s) differ by more than {tolerance_pct}%");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "# zrpc benchmarks\n\n| fact | value |\n|---|---|\n| run time | 400 s |\n\n\
        ## Overhead\n\n**Server: h2load, 20000 requests, median of 7 runs**\n\n\
        | mode | server | req/s | vs bare tonic (min..max) | p50 ms |\n|---|---|---|---|---|\n\
        | pinned | bare tonic | 40000 | x1.00 (1.00..1.00) | 0.5 |\n\
        | pinned | zrpc full chain | 32000 | x0.80 (0.75..0.82) | 0.6 |\n\
        | unpinned | go-zero | skipped: go not found | - | - |\n\n\
        ## Shedding\n\n| server | goodput / capacity |\n|---|---|\n| zrpc | x0.95 |\n";

    #[test]
    fn ratio_cells_are_read_with_or_without_their_spread() {
        assert_eq!(ratio_value("x0.80 (0.75..0.82)"), Some(0.8));
        assert_eq!(ratio_value("x1.5"), Some(1.5));
        assert_eq!(ratio_value("-"), None);
        assert_eq!(ratio_value("xyz"), None);
        assert_eq!(ratio_value("12.5"), None);
    }

    #[test]
    fn ratios_are_keyed_by_section_table_subject_and_column() {
        let r = ratios(A);
        assert_eq!(r.len(), 3, "{r:?}");
        let k = (
            "Overhead".to_owned(),
            "Server: h2load, # requests, median of # runs".to_owned(),
            "pinned / zrpc full chain".to_owned(),
            "vs bare tonic (min..max)".to_owned(),
        );
        assert_eq!(r.get(&k), Some(&0.8));
        let k = (
            "Shedding".to_owned(),
            String::new(),
            "zrpc".to_owned(),
            "goodput / capacity".to_owned(),
        );
        assert_eq!(r.get(&k), Some(&0.95));
    }

    #[test]
    fn within_tolerance_passes_beyond_it_fails_whichever_report_comes_first() {
        let b = A.replace("x0.80 (0.75..0.82)", "x0.85 (0.80..0.90)");
        let (lines, unmatched) = compare(A, &b, 0.10);
        assert!(unmatched.is_empty());
        assert!(lines.iter().all(|l| l.pass), "{lines:?}");
        let c = A.replace("x0.80 (0.75..0.82)", "x0.90 (0.80..0.90)");
        for (x, y) in [(A, c.as_str()), (c.as_str(), A)] {
            let (lines, _) = compare(x, y, 0.10);
            let bad: Vec<_> = lines.iter().filter(|l| !l.pass).collect();
            assert_eq!(bad.len(), 1, "{lines:?}");
            assert!((bad[0].diff - 0.125).abs() < 1e-9, "{:?}", bad[0]);
        }
    }

    #[test]
    fn tables_line_up_across_rounds_and_sizes() {
        let b = A.replace(
            "20000 requests, median of 7 runs",
            "4000 requests, median of 1 runs",
        );
        let (lines, unmatched) = compare(A, &b, 0.10);
        assert_eq!((lines.len(), unmatched.len()), (3, 0), "{unmatched:?}");
        assert_eq!(
            mask_numbers("h2load 1.5 s, 20,000 calls"),
            "h2load # s, # calls"
        );
    }

    #[test]
    fn a_ratio_marked_unstable_in_either_report_is_excluded_with_its_reason() {
        let shed = "## Shedding\n\n| server | goodput / capacity (min..max per s) |\n|---|---|\n";
        let a = format!("{shed}| go-zero | x0.12 (0.00..0.70) unstable: halves x0.05 / x0.30 |\n");
        let b = format!("{shed}| go-zero | x0.21 (0.00..0.75) |\n");
        for (x, y, side) in [(&a, &b, "A"), (&b, &a, "B")] {
            let (lines, unmatched) = compare(x, y, 0.10);
            assert!(unmatched.is_empty());
            assert_eq!(lines.len(), 1);
            assert!(lines[0].pass, "{lines:?}");
            let why = lines[0].excluded.as_deref().unwrap_or_default();
            assert_eq!(why, format!("{side}: unstable: halves x0.05 / x0.30"));
        }
        // Without the mark the same pair fails.
        let c = a.replace(" unstable: halves x0.05 / x0.30", "");
        let (lines, _) = compare(&c, &b, 0.10);
        assert!(!lines[0].pass && lines[0].excluded.is_none());
    }

    #[test]
    fn ratios_only_one_report_has_are_listed() {
        let b = A.replace("| zrpc | x0.95 |", "| zrpc | - |");
        let (lines, unmatched) = compare(A, &b, 0.10);
        assert_eq!(lines.len(), 2);
        assert_eq!(unmatched.len(), 1);
        assert_eq!(unmatched[0].2, "zrpc");
    }

    #[test]
    fn run_fails_on_a_difference_and_on_reports_without_ratios() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b, c) = (
            dir.path().join("a.md"),
            dir.path().join("b.md"),
            dir.path().join("c.md"),
        );
        std::fs::write(&a, A).expect("write");
        std::fs::write(&b, A.replace("x0.80 (0.75..0.82)", "x0.95")).expect("write");
        std::fs::write(&c, "# nothing\n").expect("write");
        assert!(run(&a, &a, 10.0).is_ok());
        let e = run(&a, &b, 10.0).expect_err("0.80 vs 0.95 is 18.8%");
        assert!(e.to_string().contains("1 ratio(s)"), "{e}");
        let e = run(&a, &c, 10.0).expect_err("no ratios");
        assert!(e.to_string().contains("share no ratio"), "{e}");
        assert!(run(&a, &dir.path().join("none.md"), 10.0).is_err());
    }
}
