//! gzip on unary calls with a 256 KiB text request (words and numbers: gzip makes it about a
//! third), with and without compression: a zrpc client calling a zrpc server (`Compression:
//! gzip` on both) against a bare tonic channel calling a bare tonic server with tonic's own
//! gzip (`send_compressed` and `accept_compressed` on both). Octets on the wire per call are the
//! load generator's, from `/proc/self/io`. Pinned as the payloads section, alternating rounds,
//! medians of per-round ratios.

use anyhow::Result;

use super::{Ctx, Gen, LoadSpec, Pinning, Profile, ServerSpec, Side};
use crate::report::{MISSING, Section, Table, f, round_ratio};
use crate::stats::median;

/// The request's size.
const LARGE: usize = 256 << 10;
/// Concurrent calls of the load generator.
const CONCURRENCY: usize = 4;

/// (label, server profile, client, gzip)
const SUBJECTS: [(&str, Profile, Gen, bool); 4] = [
    ("bare tonic", Profile::Tonic, Gen::Tonic, false),
    ("bare tonic, gzip", Profile::Tonic, Gen::Tonic, true),
    ("zrpc", Profile::Quiet, Gen::Zrpc("p2c_ewma"), false),
    ("zrpc, gzip", Profile::Quiet, Gen::Zrpc("p2c_ewma"), true),
];

pub(super) fn run(ctx: &Ctx<'_>) -> Result<Section> {
    let rounds = ctx.opts.rounds;
    let secs = ctx.opts.round_secs;
    let pin = Pinning::of(ctx);
    let (srv_cpu, load_cpu, threads) = (pin.server_cpu, pin.load_cpu, pin.threads);
    let running: Vec<_> = SUBJECTS
        .iter()
        .map(|&(_, profile, _, gzip)| {
            let spec = ServerSpec {
                profile,
                cpu: srv_cpu,
                threads,
                gzip,
                ..ServerSpec::default()
            };
            ctx.server(Side::Rust, &spec)
        })
        .collect::<Result<_>>()?;
    let n = SUBJECTS.len();
    // per subject, per round
    let (mut rate, mut cpu, mut client_cpu, mut sent, mut p99) = (
        vec![Vec::new(); n],
        vec![Vec::new(); n],
        vec![Vec::new(); n],
        vec![Vec::new(); n],
        vec![Vec::new(); n],
    );
    let mut reruns = 0;
    let mut lost = Vec::new();
    let pb = ctx.progress((rounds * n) as u64, "compression");
    for round in 0..rounds {
        for k in 0..n {
            let s = (k + round) % n;
            let (label, _, client, gzip) = SUBJECTS[s];
            pb.set_message(label);
            let spec = LoadSpec {
                endpoints: vec![running[s].addr.clone()],
                concurrency: CONCURRENCY,
                duration_ms: (secs * 1000.0).round() as u64,
                warmup: ctx.size(8, 40),
                cpu: load_cpu,
                threads,
                payload_bytes: LARGE,
                text: true,
                gzip,
                ..LoadSpec::default()
            };
            let cpu0 = running[s].proc.cpu_us();
            let (result, share) = ctx.load_rerun_empty(client, &spec, &mut reruns);
            let used = running[s].proc.cpu_us() - cpu0;
            lost.push(share);
            let (summary, _) = result?;
            let ok = summary.ok;
            if ok == 0 || summary.failed > 0 {
                for v in [
                    &mut rate[s],
                    &mut cpu[s],
                    &mut client_cpu[s],
                    &mut sent[s],
                    &mut p99[s],
                ] {
                    v.push(MISSING);
                }
            } else {
                rate[s].push(ok as f64 * 1000.0 / summary.elapsed_ms);
                // Server CPU over the whole run (warm-up and connection included).
                cpu[s].push(used / ok as f64);
                client_cpu[s].push(summary.cpu_us);
                sent[s].push(summary.sent_per_call);
                p99[s].push(summary.p99_ms);
            }
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    let mut t = Table::new(
        &format!(
            "Unary calls with a 256 KiB text request (`SayHello`, short reply), with and without \
             gzip on both sides: {CONCURRENCY} concurrent callers, {secs} s per run, median of \
             {rounds} alternating runs"
        ),
        &[
            "client -> server",
            "calls/s",
            "vs bare tonic alike (min..max)",
            "octets sent per call",
            "server CPU µs per call",
            "client CPU µs per call",
            "p99 ms",
        ],
    );
    for (s, &(label, _, _, gzip)) in SUBJECTS.iter().enumerate() {
        // zrpc's rows against bare tonic with the same compression
        let base = usize::from(gzip);
        t.row(vec![
            label.to_owned(),
            f(median(rate[s].clone()), 0),
            round_ratio(&rate[s], &rate[base]),
            f(median(sent[s].clone()), 0),
            f(median(cpu[s].clone()), 1),
            f(median(client_cpu[s].clone()), 1),
            f(median(p99[s].clone()), 2),
        ]);
    }
    let notes = pin.notes(&lost, reruns);
    Ok(Section {
        intro: "Each client calls the server of its kind: a bare tonic channel a bare tonic \
                server, a zrpc client a zrpc server (full chain), both with gzip on or both \
                off, so each row is what a deployment of that kind pays. The request is 256 KiB \
                of text (words and numbers from a small vocabulary) that gzip shrinks to about \
                a third; the reply is a few octets. Octets sent per call are what the load \
                generator wrote (`/proc/self/io` `wchar`: the HTTP/2 frames, TCP/IP headers \
                aside). Compression costs CPU on both sides and saves octets on the wire: on \
                loopback, as here, only the cost shows in calls/s. Pinned as \
                the payloads section: the server on CPU 0 with one runtime thread, the client \
                on CPU 1 with one thread."
            .into(),
        tables: vec![t],
        notes,
        ..Section::default()
    })
}
