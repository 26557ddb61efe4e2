//! `zrpc-bench check-report <file>`: is a report well formed? Every scenario section present,
//! none FAILED, each with at least one table whose rows are complete (a subject that could not
//! be measured says `skipped: <why>`), and every chart it links is an SVG file that exists.
//! `scripts/test.sh` runs it on the `--quick` report (a smoke test of the harness, not of
//! timings).

use std::path::Path;

use anyhow::{Context, Result, bail};

/// The section titles a full report has, in order.
pub(crate) const SECTIONS: [&str; 11] = [
    "Overhead: throughput, CPU and memory",
    "Latency: serial calls",
    "Balance: one slow node",
    "Breaker: a backend that fails, then heals",
    "Shedding: 2x overload of a CPU-bound handler",
    "Overload: a handler bound by a downstream resource",
    "Failover and registration",
    "Memory per idle connection",
    "Server streaming and 256 KiB requests",
    "gzip on 256 KiB requests",
    "Scaling with the fleet",
];

/// What each section must contain besides a table (the columns and tables that carry the
/// method: spreads next to ratios, the noise-free instruction counts, the real overload factor,
/// the per-fault time to the last call, registration timed from the process start, go-zero
/// beside zrpc as the fleet grows).
pub(crate) const REQUIRED: [(&str, &str); 18] = [
    (SECTIONS[0], "vs bare tonic (min..max)"),
    (SECTIONS[0], "CPU/req vs bare tonic (min..max)"),
    (SECTIONS[0], "Instructions per request under callgrind"),
    (SECTIONS[0], "Client instructions per call under callgrind"),
    (SECTIONS[0], "Noise monitor"),
    (SECTIONS[1], "p50 - bare tonic channel, µs (min..max)"),
    (SECTIONS[4], "offered / capacity"),
    (SECTIONS[5], "critical OK"),
    (SECTIONS[6], "last call to the victim started"),
    (SECTIONS[6], "process start -> first request"),
    (SECTIONS[7], "KiB per connection"),
    (SECTIONS[8], "messages/s"),
    (SECTIONS[9], "octets sent per call"),
    (SECTIONS[10], "CPU ns per pick, client's set"),
    (SECTIONS[10], "PUT -> picker with it"),
    (SECTIONS[10], "| go-zero |"),
    (SECTIONS[10], "CPU per call vs bare tonic (min..max)"),
    (SECTIONS[10], "per open stream, bytes"),
];

/// Checks the report at `path`; the error lists every problem found.
pub(crate) fn run(path: &Path) -> Result<()> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the report {}", path.display()))?;
    let problems = problems(&text, path.parent().unwrap_or(Path::new(".")));
    if problems.is_empty() {
        println!(
            "{}: well formed ({} sections)",
            path.display(),
            SECTIONS.len()
        );
        return Ok(());
    }
    bail!(
        "{} is not a well-formed report:\n  - {}",
        path.display(),
        problems.join("\n  - ")
    )
}

/// Everything wrong with a report's text (charts resolved against `dir`).
pub(crate) fn problems(text: &str, dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if !text.starts_with("# zrpc benchmarks") {
        out.push("it does not start with `# zrpc benchmarks`".into());
    }
    if !text.contains("cargo run --release -p zrpc-bench --") {
        out.push("the exact command is missing".into());
    }
    for fact in ["| commit |", "| CPU |", "| date (UTC) |"] {
        if !text.contains(fact) {
            out.push(format!("the machine facts lack `{fact}`"));
        }
    }
    let parts: Vec<&str> = text.split("\n## ").skip(1).collect();
    for title in SECTIONS {
        let Some(body) = parts.iter().find(|p| p.starts_with(title)) else {
            out.push(format!("section `{title}` is missing"));
            continue;
        };
        if body.contains("FAILED") {
            out.push(format!("section `{title}` FAILED"));
        }
        for (_, needle) in REQUIRED.iter().filter(|(s, _)| *s == title) {
            if !body.contains(needle) {
                out.push(format!("section `{title}` lacks `{needle}`"));
            }
        }
        let mut tables = 0;
        let mut lines = body.lines().peekable();
        while let Some(line) = lines.next() {
            let is_sep = lines.peek().is_some_and(|l| l.starts_with("|---"));
            if !(line.starts_with('|') && is_sep) {
                continue;
            }
            let headers = cells(line);
            let width = headers.len();
            lines.next();
            let mut rows = 0;
            while let Some(row) = lines.next_if(|l| l.starts_with('|')) {
                rows += 1;
                let c = cells(row);
                if c.len() != width {
                    out.push(format!(
                        "section `{title}`: a row has {} cells, its header {width}: {row}",
                        c.len()
                    ));
                }
                if c.iter().any(|c| c.is_empty()) {
                    out.push(format!("section `{title}`: a row has an empty cell: {row}"));
                }
                // A ratio with a spread: `x0.80 (0.75..0.82)`, `x0.80` (one round), `-`, or a
                // skipped row's text; a difference in µs: `+8.0 (+6.5..+12.0)`.
                for (h, v) in headers.iter().zip(&c) {
                    let diff = h.contains("µs")
                        && v.split_whitespace()
                            .next()
                            .is_some_and(|n| n.parse::<f64>().is_ok());
                    let ok = v == "-"
                        || v.starts_with("skipped")
                        || (crate::compare::ratio_value(v).is_some() || diff) && spread_ok(v);
                    if h.ends_with("(min..max)") && !ok {
                        out.push(format!(
                            "section `{title}`: `{h}` is not a ratio with its spread: {v}"
                        ));
                    }
                }
            }
            if rows == 0 {
                out.push(format!("section `{title}`: a table has no rows"));
            }
            tables += 1;
        }
        if tables == 0 {
            out.push(format!("section `{title}` has no table"));
        }
        for chart in body.split("](").skip(1) {
            let Some(file) = chart.split(')').next() else {
                continue;
            };
            if !file.ends_with(".svg") {
                continue;
            }
            let svg = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
            if !svg.trim_start().starts_with("<svg") {
                out.push(format!(
                    "section `{title}`: chart {file} is missing or not SVG"
                ));
            }
        }
    }
    out
}

/// `x0.80` or `x0.80 (0.75..0.82)` (or `+8.0 (+6.5..+12.0)`) with min <= median <= max.
fn spread_ok(v: &str) -> bool {
    let Some((med, rest)) = v.split_once(' ') else {
        return true;
    };
    let med: Option<f64> = med.trim_start_matches('x').parse().ok();
    let range = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .and_then(|r| r.split_once(".."))
        .and_then(|(a, b)| Some((a.parse::<f64>().ok()?, b.parse::<f64>().ok()?)));
    matches!((med, range), (Some(m), Some((lo, hi))) if lo <= m + 0.005 && m <= hi + 0.005)
}

fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split(" | ").map(|c| c.trim().to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(section_body: &str) -> String {
        let mut s = String::from(
            "# zrpc benchmarks\n\n```sh\ncargo run --release -p zrpc-bench -- all\n```\n\n| fact | value |\n|---|---|\n| date (UTC) | x |\n| commit | y |\n| CPU | z |\n",
        );
        for t in SECTIONS {
            s.push_str(&format!("\n## {t}\n\n{section_body}\n"));
            for (_, needle) in REQUIRED.iter().filter(|(s, _)| *s == t) {
                s.push_str(&format!("\n{needle}\n"));
            }
        }
        s
    }

    #[test]
    fn ratio_columns_need_a_well_formed_spread() {
        let ok = "| a | vs x (min..max) |\n|---|---|\n| 1 | x0.80 (0.75..0.82) |\n| 2 | x1.00 |\n| 3 | - |\n";
        assert_eq!(problems(&report(ok), Path::new("/x")), Vec::<String>::new());
        let diff = "| a | p50 - b, µs (min..max) |\n|---|---|\n| 1 | +8.0 (+6.5..+12.0) |\n| 2 | -5.0 (-7.0..+1.0) |\n| 3 | +0.0 |\n";
        assert_eq!(
            problems(&report(diff), Path::new("/x")),
            Vec::<String>::new()
        );
        let bad_diff = diff.replace("+8.0 (+6.5", "+18.0 (+6.5");
        assert!(
            problems(&report(&bad_diff), Path::new("/x"))
                .iter()
                .any(|m| m.contains("not a ratio with its spread")),
            "the median of a difference lies inside its spread"
        );
        for bad in ["x0.90 (0.75..0.82)", "0.80", "x0.80 (0.75-0.82)"] {
            let r = report(&format!(
                "| a | vs x (min..max) |\n|---|---|\n| 1 | {bad} |\n"
            ));
            let p = problems(&r, Path::new("/x"));
            assert!(
                p.iter().any(|m| m.contains("not a ratio with its spread")),
                "{bad}: {p:?}"
            );
        }
    }

    #[test]
    fn the_method_columns_are_required() {
        let r = report("| a | b |\n|---|---|\n| 1 | 2 |\n")
            .replace("\nInstructions per request under callgrind\n", "\n");
        let p = problems(&r, Path::new("/x"));
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("lacks `Instructions per request"), "{p:?}");
    }

    #[test]
    fn a_complete_report_passes() {
        let r = report("| a | b |\n|---|---|\n| 1 | skipped: go not found |\n");
        assert_eq!(
            problems(&r, Path::new("/nonexistent")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn missing_sections_tables_and_cells_are_named() {
        let r = report("| a | b |\n|---|---|\n| 1 |  |\n");
        let p = problems(&r, Path::new("/nonexistent"));
        assert!(p.iter().any(|m| m.contains("empty cell")), "{p:?}");
        let r = report("no table here");
        let p = problems(&r, Path::new("/nonexistent"));
        assert_eq!(p.len(), SECTIONS.len(), "{p:?}");
        assert!(p[0].contains("has no table"));
        let r = report("| a | b |\n|---|---|\n| 1 | 2 |\n").replace("## Latency", "## Lat");
        assert!(
            problems(&r, Path::new("/x"))
                .iter()
                .any(|m| m.contains("`Latency: serial calls` is missing"))
        );
    }

    #[test]
    fn failed_sections_and_missing_charts_fail() {
        let r = report("FAILED: boom\n\n| a |\n|---|\n| 1 |\n");
        assert!(
            problems(&r, Path::new("/x"))
                .iter()
                .any(|m| m.contains("FAILED"))
        );
        let r = report("| a |\n|---|\n| 1 |\n\n![c](b/none.svg)\n");
        assert!(
            problems(&r, Path::new("/x"))
                .iter()
                .any(|m| m.contains("none.svg is missing"))
        );
    }

    #[test]
    fn rows_must_match_their_header() {
        let r = report("| a | b |\n|---|---|\n| 1 | 2 | 3 |\n");
        assert!(
            problems(&r, Path::new("/x"))
                .iter()
                .any(|m| m.contains("3 cells"))
        );
    }
}
