//! What the server's and the client's metric families share (each crate defines its families;
//! go-zero's names, labels and buckets are the contract, see `docs/metrics.md`).

/// go-zero's duration buckets, in milliseconds.
pub const DURATION_BUCKETS_MS: [f64; 12] = [
    1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2000.0, 5000.0,
];
