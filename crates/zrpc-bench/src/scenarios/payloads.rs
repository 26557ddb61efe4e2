//! Beyond small unary calls: server-streaming messages per second, and unary calls whose
//! request is 256 KiB, zrpc's server against a bare tonic server. One load generator for both
//! (a bare tonic channel, this binary's `load`), so that only the server differs; pinned as the
//! overhead section's headline mode, alternating rounds, medians of per-round ratios.

use anyhow::Result;

use super::{Ctx, Gen, LoadSpec, Pinning, Profile, ServerSpec, Side};
use crate::report::{MISSING, Section, Table, f, round_ratio};
use crate::stats::median;

/// Messages per server stream.
const STREAM_LEN: u32 = 1000;
/// The large request's size.
const LARGE: usize = 256 << 10;
/// Concurrent calls (streams) of the load generator.
const CONCURRENCY: usize = 4;

/// One kind of load: (name, messages per stream, request octets).
const LOADS: [(&str, u32, usize); 2] = [("stream", STREAM_LEN, 0), ("unary 256 KiB", 0, LARGE)];

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let rounds = ctx.opts.rounds;
    let secs = ctx.opts.round_secs;
    let pin = Pinning::of(ctx);
    let (srv_cpu, load_cpu, threads) = (pin.server_cpu, pin.load_cpu, pin.threads);
    let servers = [
        (
            "bare tonic",
            ServerSpec {
                cpu: srv_cpu,
                threads,
                ..ServerSpec::default()
            },
        ),
        (
            "zrpc full chain",
            ServerSpec {
                profile: Profile::Quiet,
                cpu: srv_cpu,
                threads,
                ..ServerSpec::default()
            },
        ),
    ];
    let running: Vec<_> = servers
        .iter()
        .map(|(_, spec)| ctx.server(Side::Rust, spec))
        .collect::<Result<_>>()?;
    // rate[load][server]: messages/s (stream) or calls/s (unary), per round.
    let mut rate = vec![vec![Vec::new(); servers.len()]; LOADS.len()];
    let mut cpu = vec![vec![Vec::new(); servers.len()]; LOADS.len()];
    let mut p99 = vec![vec![Vec::new(); servers.len()]; LOADS.len()];
    let mut reruns = 0;
    let mut lost = Vec::new();
    let pb = ctx.progress((rounds * LOADS.len() * servers.len()) as u64, "payloads");
    for round in 0..rounds {
        for (l, &(name, stream, payload)) in LOADS.iter().enumerate() {
            for k in 0..servers.len() {
                let s = (k + round) % servers.len();
                pb.set_message(format!("{name}: {}", servers[s].0));
                let spec = LoadSpec {
                    endpoints: vec![running[s].addr.clone()],
                    concurrency: CONCURRENCY,
                    duration_ms: (secs * 1000.0).round() as u64,
                    warmup: ctx.size(8, 40),
                    cpu: load_cpu,
                    threads,
                    stream,
                    payload_bytes: payload,
                    ..LoadSpec::default()
                };
                let cpu0 = running[s].proc.cpu_us();
                let (result, share) = ctx.load_rerun_empty(Gen::Tonic, &spec, &mut reruns);
                let used = running[s].proc.cpu_us() - cpu0;
                lost.push(share);
                let (summary, _) = result?;
                let units = if stream > 0 {
                    summary.messages
                } else {
                    summary.ok
                };
                if units == 0 || summary.failed > 0 {
                    rate[l][s].push(MISSING);
                    cpu[l][s].push(MISSING);
                    p99[l][s].push(MISSING);
                } else {
                    rate[l][s].push(units as f64 * 1000.0 / summary.elapsed_ms);
                    // Server CPU over the whole run (warm-up and connection included).
                    cpu[l][s].push(used / units as f64);
                    p99[l][s].push(summary.p99_ms);
                }
                pb.inc(1);
            }
        }
    }
    pb.finish_and_clear();
    let mut tables = Vec::new();
    for (l, &(name, ..)) in LOADS.iter().enumerate() {
        let (caption, unit, each) = if name == "stream" {
            (
                format!(
                    "Server streaming: {CONCURRENCY} concurrent streams of {STREAM_LEN} \
                     messages (`SayHelloStream`), {secs} s per run, median of {rounds} \
                     alternating runs"
                ),
                "messages/s",
                "message",
            )
        } else {
            (
                format!(
                    "Unary calls with a 256 KiB request (`SayHello`, short reply): \
                     {CONCURRENCY} concurrent callers, {secs} s per run, median of {rounds} \
                     alternating runs"
                ),
                "calls/s",
                "call",
            )
        };
        let mut t = Table::new(
            &caption,
            &[
                "server",
                unit,
                "vs bare tonic (min..max)",
                &format!("server CPU µs per {each}"),
                "CPU vs bare tonic (min..max)",
                if name == "stream" {
                    "p99 ms (whole stream)"
                } else {
                    "p99 ms"
                },
            ],
        );
        for (s, (label, _)) in servers.iter().enumerate() {
            t.row(vec![
                (*label).to_owned(),
                f(median(rate[l][s].clone()), 0),
                round_ratio(&rate[l][s], &rate[l][0]),
                f(median(cpu[l][s].clone()), 2),
                round_ratio(&cpu[l][s], &cpu[l][0]),
                f(median(p99[l][s].clone()), 2),
            ]);
        }
        tables.push(t);
    }
    tables.push(super::instructions::large_request_table(ctx, LARGE));
    let notes = pin.notes(&lost, reruns);
    Ok(Section {
        intro: "Both servers run the same greeter; the client is one bare tonic channel \
                (this binary's `load --client tonic`) for both, so only the server differs. \
                Pinned as the overhead section's headline mode: the server on CPU 0 with one \
                runtime thread, the client on CPU 1 with one thread. A stream is read to its \
                end; a 256 KiB request is answered with a short reply, so the request's way \
                in (flow control, the frame scanner, the request-bytes budget, decoding) is \
                what is measured. Server CPU is the server process's user+system time over the \
                whole run (its warm-up calls included) per message or call. Runs alternate \
                round by round (the order rotates); a ratio is the median of the per-round \
                ratios, with their min..max."
            .into(),
        tables,
        notes,
        ..Section::default()
    })
}
