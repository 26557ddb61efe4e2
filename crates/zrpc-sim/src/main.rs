//! `zrpc-sim table`: prints the comparison tables of `docs/balancing.md`;
//! `zrpc-sim shed`: the adaptive shedder under a 2x step overload (`docs/middleware.md`);
//! `zrpc-sim retries`: retry storms with and without a retry budget (`docs/retries.md`);
//! `zrpc-sim limit`: overload of a handler bound by a downstream resource (`docs/overload.md`).

use std::time::Instant;

fn main() {
    let cmd = std::env::args().nth(1).unwrap_or_else(|| "table".into());
    match cmd.as_str() {
        "table" => {
            let t = Instant::now();
            print!("{}", zrpc_sim::table::markdown());
            eprintln!("simulated in {:.1} s", t.elapsed().as_secs_f64());
        }
        "shed" => {
            let t = Instant::now();
            print!("{}", zrpc_sim::shed_markdown());
            eprintln!("simulated in {:.1} s", t.elapsed().as_secs_f64());
        }
        "limit" => {
            let t = Instant::now();
            print!("{}", zrpc_sim::limit_markdown());
            eprintln!("simulated in {:.1} s", t.elapsed().as_secs_f64());
        }
        "retries" => {
            let t = Instant::now();
            print!("{}", zrpc_sim::retries_markdown());
            eprintln!("simulated in {:.1} s", t.elapsed().as_secs_f64());
        }
        other => {
            eprintln!(
                "zrpc-sim: unknown command {other:?}; usage: zrpc-sim [table|shed|retries|limit]"
            );
            std::process::exit(2);
        }
    }
}
