//! Instructions per request under callgrind: the noise-free column of `overhead` (valgrind counts
//! instructions, so a busy neighbour cannot move the figure). The method of
//! `scripts/bench_instructions.sh`: each server runs under `valgrind --tool=callgrind` twice,
//! h2load (-c 10 -m 50) sends it N1 then N2 calls, and (Ir(N2) - Ir(N1)) / (N2 - N1) cancels
//! start-up, connection set-up and shutdown.

use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::{Ctx, Gen, H2Amount, LoadSpec, Profile, ServerSpec, Side, h2load_body, hello_request};
use crate::report::{Table, f, ratio};

/// The callgrind table for `servers` (go-zero rows say why they are skipped).
pub(super) fn table(ctx: &Ctx<'_>, servers: &[(Side, Profile, &str)]) -> Table {
    // Quick: a debug build under callgrind serves ~40 calls/s here; the smoke test only proves
    // the path, with the bare tonic server and a few dozen calls.
    let (n1, n2) = ctx.size((20, 60), (1_000, 4_000));
    let mut t = Table::new(
        &format!(
            "Instructions per request under callgrind (h2load -c 10 -m 50, (Ir({n2}) - Ir({n1})) / {}; one server thread; noise-free)",
            n2 - n1
        ),
        &["server", "instructions/request", "vs bare tonic"],
    );
    let valgrind = ctx.env.valgrind.as_ref().map(|_| ());
    let mut bare = 0.0;
    for (i, (side, profile, name)) in servers.iter().enumerate() {
        if let Err(e) = &valgrind {
            t.skipped_row(name, e);
            continue;
        }
        if ctx.opts.quick && i > 0 {
            t.skipped_row(
                name,
                "--quick measures bare tonic only (a debug build under callgrind is slow)",
            );
            continue;
        }
        if *side == Side::Go {
            t.skipped_row(
                name,
                "valgrind 3.19's callgrind aborts on Go's signals (async preemption, SIGTERM), so a Go server cannot be counted",
            );
            continue;
        }
        match per_request(ctx, *profile, n1, n2) {
            Ok(ir) => {
                if i == 0 {
                    bare = ir;
                }
                t.row(vec![(*name).into(), f(ir, 0), ratio(ir, bare)]);
            }
            Err(e) => t.skipped_row(name, format!("callgrind run failed: {e:#}")),
        }
    }
    t
}

/// The callgrind table for `clients`, all calling one bare tonic server.
pub(super) fn client_table(ctx: &Ctx<'_>, clients: &[Gen]) -> Table {
    // Quick: a debug build of the client under callgrind is slow; a few dozen calls prove the path.
    let (n1, n2) = ctx.size((20, 60), (4_000, 16_000));
    let mut t = Table::new(
        &format!(
            "Client instructions per call under callgrind (-c 50, one thread, against a bare tonic server; (Ir({n2}) - Ir({n1})) / {}; noise-free)",
            n2 - n1
        ),
        &["client", "instructions/call", "vs bare tonic channel"],
    );
    if let Err(e) = &ctx.env.valgrind {
        t.skipped_row("every client", e);
        return t;
    }
    let spec = ServerSpec {
        profile: Profile::Tonic,
        threads: 1,
        ..ServerSpec::default()
    };
    let server = match ctx.server(Side::Rust, &spec) {
        Ok(s) => s,
        Err(e) => {
            t.skipped_row(
                "every client",
                format!("the bare tonic server did not start: {e:#}"),
            );
            return t;
        }
    };
    // The bare tonic channel first: the ratios divide by it.
    let mut order: Vec<Gen> = clients
        .iter()
        .copied()
        .filter(|c| *c == Gen::Tonic)
        .collect();
    order.extend(clients.iter().copied().filter(|c| *c != Gen::Tonic));
    let mut bare = 0.0;
    for client in order {
        let name = client.label();
        if client == Gen::GoZero {
            t.skipped_row(
                &name,
                "valgrind 3.19's callgrind aborts on Go's signals (async preemption, SIGTERM), so a Go client cannot be counted",
            );
            continue;
        }
        let count = |n: u64| -> Result<f64> {
            let out = ctx.file("callgrind-client.out");
            let load = LoadSpec {
                endpoints: vec![server.addr.clone()],
                concurrency: 50,
                calls: n,
                threads: 1,
                callgrind: Some(out.clone()),
                ..LoadSpec::default()
            };
            let (summary, _) = ctx.load(client, &load)?;
            if summary.calls < n {
                bail!("{} of {n} calls completed", summary.calls);
            }
            let total = total_of(&out);
            let _ = std::fs::remove_file(&out);
            total
        };
        match count(n1).and_then(|a| Ok((count(n2)? - a) / (n2 - n1) as f64)) {
            Ok(ir) => {
                if client == Gen::Tonic {
                    bare = ir;
                }
                t.row(vec![name, f(ir, 0), ratio(ir, bare)]);
            }
            Err(e) => t.skipped_row(&name, format!("callgrind run failed: {e:#}")),
        }
    }
    t
}

/// The callgrind table of unary calls with a `len`-octet request: bare tonic and zrpc's full
/// chain (the `payloads` scenario's noise-free column).
pub(super) fn large_request_table(ctx: &Ctx<'_>, len: usize) -> Table {
    let (n1, n2) = ctx.size((5, 15), (50, 550));
    let load = Load {
        conns: 4,
        streams: 1,
        body: hello_request(len),
    };
    let mut t = Table::new(
        &format!(
            "Instructions per call with a {} KiB request under callgrind (h2load -c 4 -m 1, \
             (Ir({n2}) - Ir({n1})) / {}; one server thread; noise-free)",
            len >> 10,
            n2 - n1
        ),
        &["server", "instructions/call", "vs bare tonic"],
    );
    if let Err(e) = &ctx.env.valgrind {
        t.skipped_row("all", e);
        return t;
    }
    let mut bare = 0.0;
    for (i, (profile, name)) in [
        (Profile::Tonic, "bare tonic"),
        (Profile::Quiet, "zrpc full chain"),
    ]
    .into_iter()
    .enumerate()
    {
        match per_call(ctx, profile, n1, n2, &load) {
            Ok(ir) => {
                if i == 0 {
                    bare = ir;
                }
                t.row(vec![name.into(), f(ir, 0), ratio(ir, bare)]);
            }
            Err(e) => t.skipped_row(name, format!("callgrind run failed: {e:#}")),
        }
    }
    t
}

/// What h2load sends a server under callgrind.
struct Load {
    conns: u64,
    streams: u64,
    /// The gRPC frame of every request.
    body: Vec<u8>,
}

fn per_request(ctx: &Ctx<'_>, profile: Profile, n1: u64, n2: u64) -> Result<f64> {
    let load = Load {
        conns: 10,
        streams: 50,
        // HelloRequest{name: "world"}, as every other h2load run.
        body: b"\x00\x00\x00\x00\x07\x0a\x05world".to_vec(),
    };
    per_call(ctx, profile, n1, n2, &load)
}

fn per_call(ctx: &Ctx<'_>, profile: Profile, n1: u64, n2: u64, load: &Load) -> Result<f64> {
    let a = count(ctx, profile, n1, load)?;
    let b = count(ctx, profile, n2, load)?;
    Ok((b - a) / (n2 - n1) as f64)
}

/// Instructions a server executed from its start to its exit, `n` calls served.
fn count(ctx: &Ctx<'_>, profile: Profile, n: u64, load: &Load) -> Result<f64> {
    let out = ctx.file("callgrind.out");
    let spec = ServerSpec {
        profile,
        threads: 1,
        callgrind: Some(out.clone()),
        ..ServerSpec::default()
    };
    let mut server = ctx.server(Side::Rust, &spec)?;
    h2load_body(
        ctx,
        &server.addr,
        (load.conns, load.streams, H2Amount::Requests(n), 1),
        None,
        None,
        &load.body,
    )?;
    // callgrind writes its counts at exit: a graceful stop (zrpc's wrap-up is 1 s, slower
    // under valgrind), never SIGKILL.
    server.proc.stop(Duration::from_secs(60));
    let total = total_of(&out);
    let _ = std::fs::remove_file(&out);
    total
}

/// The instruction total of the callgrind file `out`.
fn total_of(out: &std::path::Path) -> Result<f64> {
    let text = std::fs::read_to_string(out)
        .with_context(|| format!("callgrind wrote no {}", out.display()))?;
    let total = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.trim().parse::<f64>().ok());
    match total {
        Some(t) => Ok(t),
        None => bail!("no `summary:` line in {}", out.display()),
    }
}
