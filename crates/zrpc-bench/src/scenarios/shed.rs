//! Shedding: a CPU-bound handler (1 ms of spinning per call) on one pinned core, first
//! measured for capacity (closed loop), then at half capacity (unloaded latency) and at twice
//! capacity (open loop): goodput and the p99 of admitted calls, zrpc vs go-zero, both with
//! adaptive shedding on (`CpuThreshold: 900`, go-zero's default).
//!
//! Capacity is what the server completes when it is never idle: a closed loop of 8 callers
//! (8 calls queued on a core that serves one at a time) against the very server that is then
//! overloaded, after a warm-up. Rates come from the calls' own records over the send window
//! (not from the wall time of the run, which includes the last calls' tail of up to the 2 s
//! deadline): the offered rate is what the generator really sent, so the table shows that the
//! overload really was 2x, and goodput counts the calls that succeeded within the window.

use anyhow::Result;

use super::{Ctx, Gen, LoadSpec, Profile, ServerSpec, Side};
use crate::report::{SPLIT_TOLERANCE, Section, Table, f, windowed_ratio};
use crate::stats::{Record, median, percentile};

/// The 1 s windows of `[from, to)` ms (at least one; the last takes the remainder).
fn windows(from: f64, to: f64) -> Vec<(f64, f64)> {
    let n = ((to - from) / 1000.0).floor().max(1.0) as usize;
    let width = (to - from) / n as f64;
    (0..n)
        .map(|w| (from + w as f64 * width, from + (w + 1) as f64 * width))
        .collect()
}

/// Calls/s in each 1 s window of `[from, to)` ms: sent (`ok_only` false: by start time) or
/// answered OK (by end time).
fn window_rates(recs: &[Record], from: f64, to: f64, ok_only: bool) -> Vec<f64> {
    windows(from, to)
        .into_iter()
        .map(|(a, b)| {
            let n = recs
                .iter()
                .filter(|r| {
                    let t = if ok_only {
                        r.start_ms + r.latency_ms
                    } else {
                        r.start_ms
                    };
                    (!ok_only || r.code == 0) && t >= a && t < b
                })
                .count();
            n as f64 * 1000.0 / (b - a).max(1.0)
        })
        .collect()
}

/// The fewest OK calls a second needs for its p99 to count: a p99 of fewer calls is their
/// slowest one or two. A server that answers almost nothing OK under the overload would
/// otherwise get an admitted p99 made of a handful of calls per second, which moves severalfold
/// from one run to the next.
const MIN_P99_CALLS: usize = 100;

/// The p99 latency of the OK calls per 1 s window of start times over `[from, to)` ms, for the
/// windows with at least [`MIN_P99_CALLS`] OK calls, and the number of windows. The figure is
/// the median over the windows: one second in which a neighbour stalled the server moves one
/// window's p99, not the figure (a plain p99 of a few thousand calls is its 30 worst).
fn window_p99s(recs: &[Record], from: f64, to: f64) -> (Vec<f64>, usize) {
    let windows = windows(from, to);
    let n = windows.len();
    let p99s = windows
        .into_iter()
        .filter_map(|(a, b)| {
            let mut lat: Vec<f64> = recs
                .iter()
                .filter(|r| r.code == 0 && r.start_ms >= a && r.start_ms < b)
                .map(|r| r.latency_ms)
                .collect();
            lat.sort_by(f64::total_cmp);
            (lat.len() >= MIN_P99_CALLS).then(|| percentile(&lat, 0.99))
        })
        .collect();
    (p99s, n)
}

/// The ratio cell of per-second p99s `num` (of `windows` seconds) to `den`; marked unstable when
/// fewer than half the seconds had enough OK calls for a p99 ([`MIN_P99_CALLS`]): the figure
/// then rests on a few seconds, or on none.
fn p99_ratio(num: &[f64], windows: usize, den: &[f64]) -> String {
    let cell = windowed_ratio(num, den);
    if num.len() * 2 >= windows || cell.contains("unstable") {
        return cell;
    }
    format!(
        "{cell} unstable: too few OK calls ({} of {windows} s had {MIN_P99_CALLS} or more)",
        num.len()
    )
}

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let pinned = ctx.env.taskset && ctx.env.cpus >= 2;
    let (srv_cpu, load_cpu) = if pinned {
        (Some(0), Some(1))
    } else {
        (None, None)
    };
    let spin_us = 1000;
    let mut table = Table::new(
        "Handler: 1 ms CPU per call, server on one core; offered load open loop",
        &[
            "server",
            "capacity calls/s (closed loop C=8)",
            "calls shed while probing",
            "unloaded p99 ms (0.5x)",
            "offered calls/s (sent, median per s)",
            "offered / capacity (min..max per s)",
            "goodput calls/s (median per s)",
            "goodput / capacity (min..max per s)",
            "admitted p99 ms (median per s)",
            "admitted p99 vs unloaded (min..max per s)",
            "shed (ResourceExhausted)",
            "other failures",
        ],
    );
    let sides = [(Side::Rust, "zrpc"), (Side::Go, "go-zero")];
    let pb = ctx.progress(sides.len() as u64 * 3, "shed");
    let mut lost = Vec::new();
    for (side, name) in sides {
        if let (Side::Go, Err(e)) = (side, ctx.gozero()) {
            table.skipped_row(name, e);
            pb.inc(3);
            continue;
        }
        let server = ctx.server(
            side,
            &ServerSpec {
                profile: Profile::Quiet,
                spin_us,
                shedding: true,
                cpu: srv_cpu,
                threads: 1,
                ..ServerSpec::default()
            },
        )?;
        let base = LoadSpec {
            endpoints: vec![server.addr.clone()],
            timeout_ms: 2000,
            cpu: load_cpu,
            threads: 1,
            ..LoadSpec::default()
        };
        pb.set_message(format!("{name}: capacity"));
        let (cap, _) = ctx.load(
            Gen::Tonic,
            &LoadSpec {
                concurrency: 8,
                duration_ms: ctx.size(700, 4_000),
                warmup: 200,
                ..base.clone()
            },
        )?;
        let capacity = cap.ok as f64 * 1000.0 / cap.elapsed_ms.max(1.0);
        let probe_shed = cap.failed;
        pb.inc(1);
        pb.set_message(format!("{name}: 0.5x"));
        // Ten per-second p99s (was five): the unloaded p99 of a 1 ms handler is a few ms, so a
        // neighbour's time slice on the server's core moves one second's p99 by half of it;
        // the median of ten such seconds moves less than the median of five.
        let unloaded_ms = ctx.size(1_000, 10_000);
        let (_, recs) = ctx.load(
            Gen::Tonic,
            &LoadSpec {
                rate: (capacity * 0.5).max(10.0),
                duration_ms: unloaded_ms,
                records: true,
                ..base.clone()
            },
        )?;
        let (unloaded_p99s, _) = window_p99s(&recs, 0.0, unloaded_ms as f64);
        let unloaded_p99 = median(unloaded_p99s.clone());
        pb.inc(1);
        pb.set_message(format!("{name}: 2x"));
        let offered = (capacity * 2.0).max(20.0);
        // 16 s (was 10): the steady part holds 12 per-second windows, 6 in each half that the
        // stability rule compares (go-zero's shedder flips between admitting and dropping on a
        // timescale of seconds).
        let window_ms = ctx.size(1_500, 16_000);
        let before = ctx.noise.snap();
        let result = ctx.load(
            Gen::Tonic,
            &LoadSpec {
                rate: offered,
                duration_ms: window_ms,
                records: true,
                ..base.clone()
            },
        );
        lost.push(format!(
            "{name} {:.1}%",
            ctx.noise.lost_share(&before, &ctx.noise.snap()) * 100.0
        ));
        let (s, recs) = result?;
        // The first 20% of the window: the shedder's CPU reading and the queue build up.
        let from = window_ms as f64 * 0.2;
        let to = window_ms as f64;
        let sent = window_rates(&recs, from, to, false);
        let (admitted, seconds) = window_p99s(&recs, from, to);
        let good = window_rates(&recs, from, to, true);
        let shed = s.codes.get("ResourceExhausted").copied().unwrap_or(0);
        let other = s.failed - shed;
        table.row(vec![
            name.into(),
            f(capacity, 0),
            format!("{probe_shed} of {}", cap.calls),
            f(unloaded_p99, 1),
            f(median(sent.clone()), 0),
            windowed_ratio(&sent, &[capacity]),
            f(median(good.clone()), 0),
            windowed_ratio(&good, &[capacity]),
            f(median(admitted.clone()), 1),
            p99_ratio(&admitted, seconds, &unloaded_p99s),
            format!(
                "{shed} ({}%)",
                f(shed as f64 * 100.0 / s.calls.max(1) as f64, 1)
            ),
            format!("{other} of {}", s.calls),
        ]);
        pb.inc(1);
    }
    pb.finish_and_clear();
    let mut notes = vec![format!(
        "Noise monitor: share of the machine other processes and steal took during the 2x run: \
         {}. go-zero's shedder reads the whole machine's CPU, so this share moves when it sheds.",
        lost.join(", ")
    )];
    notes.push(
        "zrpc's shedder drops a call when the CPU is hot and more calls are in flight than \
         its Little's-law bound. It counts a call from the moment hyper accepts its stream, so \
         the calls waiting in tokio's run queue behind this handler (1 ms of spinning that never \
         yields to tokio) count as in flight; go-zero's interceptor counts a call when its \
         goroutine starts, and Go preempts the spinning handler. Either shedder engages only \
         once its smoothed CPU reading passes the threshold, seconds into the overload \
         (docs/middleware.md); until then calls queue and time out, which is what the halves \
         rule sees when a ratio is marked unstable."
            .into(),
    );
    if !pinned {
        notes.push("unpinned: taskset or a second CPU is missing, so the server's core is shared with the load generator".into());
    }
    Ok(Section {
        title: String::new(),
        intro: format!(
            "Both servers run their full default chain with adaptive shedding on \
                (`CpuThreshold: 900`) and a 2 s server timeout; the load generator is a bare \
                tonic channel with a 2 s deadline, on the other core. go-zero's shedder reads the \
                machine's (cgroup's) CPU usage, not the pinned core's, so on a 2-core box its \
                saturated core alone does not reach the 90% threshold; zrpc's also reads the \
                busy fraction of the cores it is pinned to and turns hot, but with a handler \
                that spins without yielding its in-flight count stays within its bound (see \
                the notes). The table shows what each server actually did. Capacity: a closed loop of 8 callers on the same \
                server (never idle), OK calls per second. At 2x the rates are taken from the \
                calls' records over the steady part of the window (its last 80%), per second: \
                sent calls per second (offered / capacity shows the overload really was 2x) and \
                calls answered OK per second (goodput), by end time; each figure is the median \
                over those seconds, with their min..max. Both p99s are taken per second of \
                send time (the admitted one over the steady part), then the median over those \
                seconds: one second in which a neighbour stalled the server does not decide the \
                figure. A shedder that flips between admitting and dropping on a timescale of \
                seconds makes a run's figure depend on where its window starts; the rule for \
                that is fixed and the same for every ratio of this table: each ratio is \
                computed again on the first and on the second half of its seconds, and when the \
                halves differ by more than {:.0}% the cell says `unstable: halves xA / xB`: one \
                run does not agree with itself, so `zrpc-bench compare` prints it with that \
                reason and does not hold two runs to it. A second's p99 counts only when it \
                answered at least {MIN_P99_CALLS} calls OK (fewer, and its p99 is its slowest \
                call or two); when fewer than half the seconds did, the admitted p99's ratio \
                says `unstable: too few OK calls`, for the same reason.",
            SPLIT_TOLERANCE * 100.0
        ),
        tables: vec![table],
        charts: Vec::new(),
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(start_ms: f64, latency_ms: f64) -> Record {
        Record {
            start_ms,
            latency_ms,
            code: 0,
            server: "-".into(),
            critical: false,
        }
    }

    #[test]
    fn a_second_with_too_few_ok_calls_has_no_p99_and_the_ratio_says_so() {
        // second 0: 200 OK calls of 1..=200 ms; second 1: 5 OK calls; second 2: none
        let mut recs: Vec<Record> = (1..=200).map(|i| ok(f64::from(i), f64::from(i))).collect();
        recs.extend((0..5).map(|i| ok(1000.0 + f64::from(i), 500.0)));
        let (p99s, seconds) = window_p99s(&recs, 0.0, 3000.0);
        assert_eq!(seconds, 3);
        assert_eq!(p99s.len(), 1, "only the first second has a p99");
        assert!((p99s[0] - 198.0).abs() < 2.5, "{p99s:?}");
        let cell = p99_ratio(&p99s, seconds, &[2.0]);
        assert!(
            cell.ends_with("unstable: too few OK calls (1 of 3 s had 100 or more)"),
            "{cell}"
        );
        // two of three seconds with enough calls: a plain ratio
        recs.extend((0..150).map(|i| ok(2000.0 + f64::from(i), 10.0)));
        let (p99s, seconds) = window_p99s(&recs, 0.0, 3000.0);
        assert_eq!(p99s.len(), 2);
        assert!(!p99_ratio(&p99s, seconds, &[2.0]).contains("unstable"));
        // none: no ratio, and the reason
        let (p99s, seconds) = window_p99s(&recs[..5], 0.0, 3000.0);
        assert_eq!(
            p99_ratio(&p99s, seconds, &[2.0]),
            "- unstable: too few OK calls (0 of 3 s had 100 or more)"
        );
    }
}
