//! Criterion benches for zrpc-core's hot paths (filled in as the modules land).

fn main() {}
