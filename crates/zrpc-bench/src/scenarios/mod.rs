//! The scenarios and what they share: starting servers and load generators as child processes.
pub(crate) struct Opts { pub(crate) quick: bool, pub(crate) rounds: usize, pub(crate) out: std::path::PathBuf }
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind { Overhead, Latency, Balance, Breaker, Shed, Failover }
pub(crate) const ALL: [Kind; 6] = [Kind::Overhead, Kind::Latency, Kind::Balance, Kind::Breaker, Kind::Shed, Kind::Failover];
pub(crate) fn run(_w: &[Kind], _o: &Opts) -> anyhow::Result<()> { Ok(()) }
