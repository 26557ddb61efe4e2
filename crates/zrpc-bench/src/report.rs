//! The Markdown report: a header (machine, date, commit, exact command), then one section per
//! scenario with its tables, charts and notes. A scenario that cannot run says why (`skipped:`),
//! one that failed says so (`FAILED:`); a table never silently disappears.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use crate::env::Env;

/// A table: headers and rows of cells.
#[derive(Debug, Clone, Default)]
pub(crate) struct Table {
    /// Its caption (bold line above it).
    pub(crate) caption: String,
    /// Column headers.
    pub(crate) headers: Vec<String>,
    /// Rows.
    pub(crate) rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these headers.
    pub(crate) fn new(caption: &str, headers: &[&str]) -> Table {
        Table {
            caption: caption.to_owned(),
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Adds a row that says why a subject was not measured (every other cell `-`).
    pub(crate) fn skipped_row(&mut self, subject: &str, why: impl AsRef<str>) {
        let mut cells = vec![subject.to_owned()];
        cells.push(format!(
            "skipped: {}",
            why.as_ref().replace('\n', " / ").replace('|', "\\|")
        ));
        while cells.len() < self.headers.len() {
            cells.push("-".into());
        }
        self.rows.push(cells);
    }
}

/// One scenario's part of the report.
#[derive(Debug, Clone, Default)]
pub(crate) struct Section {
    /// `## title`.
    pub(crate) title: String,
    /// What was measured and how (Markdown).
    pub(crate) intro: String,
    /// Tables.
    pub(crate) tables: Vec<Table>,
    /// Charts: (alt text, file name inside the charts directory).
    pub(crate) charts: Vec<(String, String)>,
    /// Findings and caveats (bullets).
    pub(crate) notes: Vec<String>,
}

/// Formats a number with `digits` decimals.
pub(crate) fn f(v: f64, digits: usize) -> String {
    if v.is_finite() {
        format!("{v:.digits$}")
    } else {
        "-".into()
    }
}

/// `a / b` as `x1.23`, `-` when b is 0.
pub(crate) fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a.is_finite() {
        format!("x{:.2}", a / b)
    } else {
        "-".into()
    }
}

/// The ratio `a[r] / b[r]` of two subjects measured in the same alternating rounds: its median,
/// then its spread over the rounds as `(min..max)` when there is more than one round, e.g.
/// `x0.79 (0.75..0.82)`. Taking the ratio round by round (rather than the ratio of medians)
/// cancels what a busy neighbour did to both subjects of a round; the spread shows what it did
/// not cancel. A round in which either subject has no figure (a run that completed no request
/// is recorded as NaN: see [`missing`]) is left out of this ratio, never turned into an extreme
/// one; `-` when no round has both figures or the series do not line up.
pub(crate) fn round_ratio(a: &[f64], b: &[f64]) -> String {
    if a.is_empty() || a.len() != b.len() {
        return "-".into();
    }
    let mut r: Vec<f64> = a
        .iter()
        .zip(b)
        .filter(|(a, b)| present(**a) && present(**b))
        .map(|(a, b)| a / b)
        .collect();
    if r.is_empty() {
        return "-".into();
    }
    r.sort_by(f64::total_cmp);
    let med = r[r.len() / 2];
    if a.len() == 1 {
        format!("x{med:.2}")
    } else {
        format!("x{med:.2} ({:.2}..{:.2})", r[0], r[r.len() - 1])
    }
}

/// The relative difference between the two halves of one run beyond which a windowed figure is
/// marked unstable (the tolerance `compare` holds two runs to).
pub(crate) const SPLIT_TOLERANCE: f64 = 0.10;

/// A ratio of figures taken per window (e.g. per second) of one long run: `num[w] / den`, where
/// the numerator and the denominator are each the median over their windows, e.g. goodput per
/// second over capacity. The cell is `x<median ratio> (<min..max over the numerator's windows>)`.
///
/// A run of one system is a time series, not independent rounds: a behaviour that flips on a
/// timescale of seconds (a shedder that admits, then drops, then admits) makes its figure depend
/// on where the window happens to start. The rule that detects it is stated and applies to every
/// windowed figure alike: the figure is computed again on the first and on the second half of
/// the windows (numerator and denominator alike); when the two halves differ by more than
/// [`SPLIT_TOLERANCE`], one run does not even agree with itself, so two runs cannot be expected
/// to agree: the cell says `unstable: halves xA / xB` and `compare` reports it without failing
/// on it (it prints the reason). With fewer than 4 windows there are no halves to compare.
pub(crate) fn windowed_ratio(num: &[f64], den: &[f64]) -> String {
    let med = |v: &[f64]| crate::stats::median(v.to_vec());
    let (n, d) = (med(num), med(den));
    if num.is_empty() || den.is_empty() || !present(d) || !n.is_finite() {
        return "-".into();
    }
    let lo = num.iter().copied().fold(f64::INFINITY, f64::min) / d;
    let hi = num.iter().copied().fold(f64::NEG_INFINITY, f64::max) / d;
    let mut cell = format!("x{:.2} ({lo:.2}..{hi:.2})", n / d);
    if num.len() >= 4 {
        let half = |v: &[f64], first: bool| {
            let h = v.len().div_ceil(2);
            let part = if first { &v[..h] } else { &v[v.len() - h..] };
            med(part)
        };
        let (d1, d2) = if den.len() >= 4 {
            (half(den, true), half(den, false))
        } else {
            (d, d)
        };
        let (h1, h2) = (half(num, true) / d1, half(num, false) / d2);
        let differ = if h1.is_finite() && h2.is_finite() && h1.min(h2) > 0.0 {
            (h1 - h2).abs() / h1.min(h2) > SPLIT_TOLERANCE
        } else {
            // A half with nothing in it (e.g. no call answered OK) against one with something.
            h1 != h2
        };
        if differ {
            let _ = write!(cell, " unstable: halves x{h1:.2} / x{h2:.2}");
        }
    }
    cell
}

/// The figure a run that measured nothing gets (zero requests completed): left out of every
/// median and per-round ratio, counted by [`missing`].
pub(crate) const MISSING: f64 = f64::NAN;

/// A figure that was measured (finite and above zero: a rate, a time, a CPU cost).
pub(crate) fn present(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

/// How many rounds of a series have no figure.
pub(crate) fn missing(series: &[f64]) -> usize {
    series.iter().filter(|v| !present(**v)).count()
}

/// Writes the report to `out` (charts are already in `charts_dir`).
pub(crate) fn write(
    out: &Path,
    charts_dir_name: &str,
    env: &Env,
    command: &str,
    elapsed_s: f64,
    sections: &[Section],
) -> Result<()> {
    let mut md = String::new();
    md.push_str("# zrpc benchmarks\n\n");
    md.push_str(
        "Generated by `zrpc-bench` (crates/zrpc-bench); do not edit by hand: rerun the command below.\n\
         zrpc, bare tonic and real go-zero run side by side in one invocation; every comparison\n\
         alternates its subjects round by round and reports medians, so that the noise of a shared\n\
         machine falls on all of them alike; in `overhead` and `latency` every subject is measured\n\
         for the same time per round, and a noise monitor reports the CPU other processes took\n\
         (busy rounds are left out whole by a fixed rule; the notes say how many). Ratios are the\n\
         numbers to compare between machines;\n\
         `(min..max)` after a ratio is its spread over the rounds (the noise), and the callgrind\n\
         instruction counts are the figures no neighbour can move. Two runs agree when\n\
         `zrpc-bench compare first.md second.md` passes (every ratio within 10%).\n\n",
    );
    let _ = writeln!(md, "Command:\n\n```sh\n{command}\n```\n");
    md.push_str("| fact | value |\n|---|---|\n");
    for (k, v) in &env.facts {
        let _ = writeln!(md, "| {k} | {} |", v.replace('|', "\\|"));
    }
    let _ = writeln!(md, "| run time | {elapsed_s:.0} s |");
    let _ = writeln!(
        md,
        "| load average at the end | {} |\n",
        std::fs::read_to_string("/proc/loadavg")
            .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    );
    let titles: Vec<&str> = sections.iter().map(|s| s.title.as_str()).collect();
    md.push_str(&contents(&titles));
    for s in sections {
        md.push_str(&section_md(s, charts_dir_name, None));
    }
    if let Some(dir) = out.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(out, md).with_context(|| format!("cannot write {}", out.display()))
}

/// The `Contents:` line for these section titles.
fn contents(titles: &[&str]) -> String {
    let mut md = String::from("Contents:");
    for t in titles {
        let anchor = t
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
            .collect::<String>()
            .replace(' ', "-");
        let _ = write!(md, " [{t}](#{anchor}) ·");
    }
    md.pop();
    md.push_str("\n\n");
    md
}

/// One section as Markdown, from its `## ` line; `measured`: a line naming the run that
/// produced it (a merged section, whose run is not the header's).
fn section_md(s: &Section, charts_dir_name: &str, measured: Option<&str>) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "## {}\n", s.title);
    if let Some(m) = measured {
        let _ = writeln!(md, "{m}\n");
    }
    if !s.intro.is_empty() {
        let _ = writeln!(md, "{}\n", s.intro.trim_end());
    }
    for t in &s.tables {
        if !t.caption.is_empty() {
            let _ = writeln!(md, "**{}**\n", t.caption);
        }
        let _ = writeln!(md, "| {} |", t.headers.join(" | "));
        let _ = writeln!(md, "|{}", "---|".repeat(t.headers.len()));
        for r in &t.rows {
            let _ = writeln!(md, "| {} |", r.join(" | "));
        }
        md.push('\n');
    }
    for (alt, file) in &s.charts {
        let _ = writeln!(md, "![{alt}]({charts_dir_name}/{file})\n");
    }
    for n in &s.notes {
        let _ = writeln!(md, "- {n}");
    }
    if !s.notes.is_empty() {
        md.push('\n');
    }
    md
}

/// Replaces `sections` in the report at `out` (adding those it lacks, in `order`), keeping its
/// header and its other sections. Each replaced section starts with the command, date and
/// commit of this run, since the header's facts are another run's.
pub(crate) fn merge(
    out: &Path,
    charts_dir_name: &str,
    env: &Env,
    command: &str,
    order: &[&str],
    sections: &[Section],
) -> Result<()> {
    let text = std::fs::read_to_string(out)
        .with_context(|| format!("--merge: cannot read the report {}", out.display()))?;
    let fact = |k: &str| {
        env.facts
            .iter()
            .find(|(key, _)| key == k)
            .map_or("?", |(_, v)| v.as_str())
    };
    let measured = format!(
        "Measured {} UTC at commit {} with `{command}` (merged into this report; the header's \
         facts are the full run's).",
        fact("date (UTC)"),
        fact("commit")
    );
    Ok(std::fs::write(
        out,
        merged(&text, charts_dir_name, &measured, order, sections),
    )?)
}

/// [`merge`] on the report's text.
fn merged(
    text: &str,
    charts_dir_name: &str,
    measured: &str,
    order: &[&str],
    sections: &[Section],
) -> String {
    let mut parts = text.split("\n## ");
    let header = parts.next().unwrap_or_default();
    let mut kept: Vec<(String, String)> = parts
        .map(|p| {
            let title = p.lines().next().unwrap_or_default().to_owned();
            (title, format!("## {p}"))
        })
        .collect();
    // Sections stay where the report has them, hand-written ones included; a section it lacks
    // goes before the first of the run's sections that `order` puts after it.
    let rank = |t: &str| order.iter().position(|o| *o == t);
    for s in sections {
        let md = section_md(s, charts_dir_name, Some(measured));
        if let Some(slot) = kept.iter_mut().find(|(t, _)| *t == s.title) {
            slot.1 = md;
            continue;
        }
        let r = rank(&s.title).unwrap_or(order.len());
        let at = kept
            .iter()
            .position(|(t, _)| rank(t).is_some_and(|o| o > r))
            .or_else(|| {
                kept.iter()
                    .rposition(|(t, _)| rank(t).is_some())
                    .map(|i| i + 1)
            })
            .unwrap_or(kept.len());
        kept.insert(at, (s.title.clone(), md));
    }
    let titles: Vec<&str> = kept.iter().map(|(t, _)| t.as_str()).collect();
    let mut md = String::new();
    for line in format!("{header}\n").split_inclusive('\n') {
        if line.starts_with("Contents:") {
            md.push_str(contents(&titles).trim_end());
            md.push('\n');
        } else {
            md.push_str(line);
        }
    }
    for (_, body) in &kept {
        let body = body.trim_end();
        md.push_str(body);
        md.push_str("\n\n");
    }
    md.truncate(md.trim_end().len());
    md.push('\n');
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_merge_replaces_its_sections_and_keeps_the_others() {
        let report =
            "# zrpc benchmarks\n\nContents: [A](#a) · [B](#b)\n\n## A\n\nold a\n\n## B\n\nold b\n";
        let new = |title: &str, intro: &str| Section {
            title: title.into(),
            intro: intro.into(),
            ..Section::default()
        };
        let out = merged(
            report,
            "benchmarks",
            "Measured now.",
            &["A", "B", "C"],
            &[new("C", "new c"), new("A", "new a")],
        );
        assert_eq!(
            out,
            "# zrpc benchmarks\n\nContents: [A](#a) · [B](#b) · [C](#c)\n\n\
             ## A\n\nMeasured now.\n\nnew a\n\n## B\n\nold b\n\n\
             ## C\n\nMeasured now.\n\nnew c\n"
        );
    }

    /// A hand-written section between two of the run's stays there; a section the report
    /// lacks goes where `order` puts it among the run's, before the hand-written ones after
    /// them.
    #[test]
    fn a_merge_keeps_every_section_in_its_place() {
        let report = "# r\n\nContents: x\n\n## A\n\na\n\n## Notes on A\n\nmine\n\n## C\n\nc\n\n\
                      ## More notes\n\nmine too\n";
        let new = |title: &str| Section {
            title: title.into(),
            intro: "new".into(),
            ..Section::default()
        };
        let titles = |md: &str| -> Vec<String> {
            md.split("\n## ")
                .skip(1)
                .map(|p| p.lines().next().unwrap_or_default().to_owned())
                .collect()
        };
        let out = merged(
            report,
            "b",
            "M.",
            &["A", "B", "C", "D"],
            &[new("A"), new("B")],
        );
        assert_eq!(titles(&out), ["A", "Notes on A", "B", "C", "More notes"]);
        let out = merged(report, "b", "M.", &["A", "B", "C", "D"], &[new("D")]);
        assert_eq!(titles(&out), ["A", "Notes on A", "C", "D", "More notes"]);
        // a report of hand-written sections only: the new one goes last
        let out = merged("# r\n\n## Mine\n\nx\n", "b", "M.", &["A"], &[new("A")]);
        assert_eq!(titles(&out), ["Mine", "A"]);
    }

    #[test]
    fn round_ratio_is_the_median_of_per_round_ratios_with_its_spread() {
        // Round 2 was slow for both subjects: its ratio is still 0.8.
        let a = [80.0, 40.0, 90.0];
        let b = [100.0, 50.0, 100.0];
        assert_eq!(round_ratio(&a, &b), "x0.80 (0.80..0.90)");
        assert_eq!(round_ratio(&[3.0], &[2.0]), "x1.50");
        assert_eq!(round_ratio(&[1.0], &[0.0]), "-");
        assert_eq!(round_ratio(&[1.0, 2.0], &[1.0]), "-");
        assert_eq!(round_ratio(&[], &[]), "-");
    }

    #[test]
    fn a_windowed_ratio_that_disagrees_with_itself_between_halves_is_marked_unstable() {
        // Steady: 8 seconds of ~750 OK calls/s over a capacity of 850.
        let steady = [740.0, 760.0, 750.0, 755.0, 745.0, 750.0, 752.0, 748.0];
        assert_eq!(windowed_ratio(&steady, &[850.0]), "x0.88 (0.87..0.89)");
        // A shedder that admits for 4 s, then drops for 4 s: the halves are x0.72 and x0.06.
        let flips = [600.0, 620.0, 610.0, 590.0, 50.0, 40.0, 60.0, 55.0];
        let cell = windowed_ratio(&flips, &[850.0]);
        assert!(cell.contains("unstable: halves x0.72 / x0.06"), "{cell}");
        // p99 per second over an unloaded p99 per second: both halves count.
        let num = [1500.0, 1510.0, 1490.0, 1505.0];
        let den = [3.0, 3.1, 6.0, 6.2];
        let cell = windowed_ratio(&num, &den);
        assert!(
            cell.starts_with("x250.") && cell.contains("unstable"),
            "{cell}"
        );
        // Too few windows to split, no denominator, nothing at all.
        assert_eq!(windowed_ratio(&[10.0, 30.0], &[10.0]), "x3.00 (1.00..3.00)");
        assert_eq!(windowed_ratio(&[10.0], &[0.0]), "-");
        assert_eq!(windowed_ratio(&[], &[1.0]), "-");
        // A half in which no call succeeded.
        let cell = windowed_ratio(&[0.0, 0.0, 0.0, 0.0, 9.0, 9.0, 9.0, 9.0], &[10.0]);
        assert!(cell.contains("unstable"), "{cell}");
    }

    #[test]
    fn a_round_without_a_figure_is_left_out_never_an_extreme_ratio() {
        // Round 2: the subject completed no request (MISSING); round 3: the reference did not.
        let a = [80.0, MISSING, 90.0, 85.0];
        let b = [100.0, 50.0, 0.0, 100.0];
        assert_eq!(
            round_ratio(&a, &b),
            "x0.85 (0.80..0.85)",
            "rounds 1 and 4 only"
        );
        assert_eq!(missing(&a), 1);
        assert_eq!(missing(&b), 1);
        assert_eq!(round_ratio(&[MISSING, MISSING], &[1.0, 1.0]), "-");
    }
}
