//! Load balancing: the lock-free P2C+EWMA picker (go-zero's `p2c_ewma`), round robin and
//! go-zero's `consistent_hash` ring over the endpoint set, and each endpoint's connection.
//!
//! The endpoint set is an immutable snapshot (`Arc<Vec<_>>`) swapped atomically (arc-swap) on each
//! resolver update; endpoints present before and after an update keep their stats and connection.
//! A pick reads the snapshot, reads the clock once, draws from a per-thread generator and touches a
//! few atomics: no lock, no allocation, no worker task.

mod conn;
pub(crate) mod consistent_hash;
pub(crate) mod endpoint;
pub(crate) mod p2c;
pub(crate) mod rng;
pub(crate) mod round_robin;
pub(crate) mod service;
pub(crate) mod stats;
mod wire;

pub use consistent_hash::{HashKey, hash_key};
pub(crate) use p2c::P2cPicker;
pub(crate) use rng::ThreadRng;
pub(crate) use round_robin::RoundRobin;
pub(crate) use service::{Balancer, is_no_endpoint};
