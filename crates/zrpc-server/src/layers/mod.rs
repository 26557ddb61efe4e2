//! What the server's chain runs besides its stages (`crate::stage`): the drain layer, which
//! answers new calls `Unavailable` once shutdown begins, and helpers the stages share.

pub(crate) mod drain;
pub(crate) mod util;

#[cfg(test)]
pub(crate) mod test_util;

pub(crate) use drain::{DrainLayer, DrainSignal};
