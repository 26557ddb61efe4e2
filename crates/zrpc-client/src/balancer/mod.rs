//! Load balancing: the lock-free P2C+EWMA picker (go-zero's `p2c_ewma`), round robin and
//! go-zero's `consistent_hash` ring, and the service that sends each request to the endpoint they
//! pick.
//!
//! The endpoint set is an immutable snapshot (`Arc<Vec<_>>`) swapped atomically (arc-swap) on each
//! resolver update; endpoints present before and after an update keep their stats and connection.
//! A pick reads the snapshot, reads the clock once, draws from a per-thread generator and touches a
//! few atomics: no lock, no allocation, no worker task.

pub(crate) mod consistent_hash;
pub(crate) mod endpoint;
mod p2c;
pub(crate) mod replay;
pub(crate) mod rng;
mod round_robin;
pub(crate) mod service;
pub(crate) mod stats;
mod wire;

pub use consistent_hash::{HashKey, HashRing, REPLICAS, hash_key};
pub use endpoint::Deadline;
pub use p2c::{
    FORCE_PICK, P2cPicker, P2cRules, PICK_TIMES, PROBE_BASE, PROBE_LAG_FACTOR, PROBE_MAX,
};
pub use replay::MAX_REPLAY_BYTES;
pub use rng::{RandomSource, ThreadRng, random_seed};
pub use round_robin::RoundRobin;
pub use service::MAX_ATTEMPTS;
pub(crate) use service::is_no_endpoint;
pub use stats::{
    BACKOFF_BASE, BACKOFF_MAX, Clock, DECAY_TIME, EJECT_AFTER, EJECT_BASE, EJECT_MAX,
    EndpointStats, FAILED_PROBE_LAG, INIT_SUCCESS, PROBE_COOLDOWN, STALL_MIN, THROTTLE_SUCCESS,
};
