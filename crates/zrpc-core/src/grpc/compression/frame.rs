//! The prefix of a gRPC message on the wire: a compressed flag and a big-endian length.

use bytes::{Buf, Bytes};

/// Octets of a message's prefix.
pub(super) const PREFIX_LEN: usize = 5;

/// The prefix of a message of `len` octets (`flag` 1: compressed).
pub(super) fn prefix(flag: u8, len: u32) -> [u8; PREFIX_LEN] {
    let [a, b, c, d] = len.to_be_bytes();
    [flag, a, b, c, d]
}

/// Reads message prefixes, also when one is split over chunks of the body.
#[derive(Debug, Default)]
pub(super) struct PrefixReader {
    octets: [u8; PREFIX_LEN],
    seen: usize,
}

impl PrefixReader {
    /// Whether no octet of a prefix is held.
    pub(super) fn is_empty(&self) -> bool {
        self.seen == 0
    }

    /// Takes prefix octets from the front of `data`: the flag and the length once the prefix
    /// is whole.
    pub(super) fn read(&mut self, data: &mut Bytes) -> Option<(u8, u32)> {
        if self.seen == 0
            && let Some(whole) = peek(data)
        {
            data.advance(PREFIX_LEN);
            return Some(whole);
        }
        let take = (PREFIX_LEN - self.seen).min(data.len());
        self.octets[self.seen..self.seen + take].copy_from_slice(&data[..take]);
        data.advance(take);
        self.seen += take;
        if self.seen < PREFIX_LEN {
            return None;
        }
        self.seen = 0;
        let [flag, a, b, c, d] = self.octets;
        Some((flag, u32::from_be_bytes([a, b, c, d])))
    }
}

/// The flag and length of the prefix at the front of `data`, when it is there whole.
pub(super) fn peek(data: &[u8]) -> Option<(u8, u32)> {
    match data {
        [flag, a, b, c, d, ..] => Some((*flag, u32::from_be_bytes([*a, *b, *c, *d]))),
        _ => None,
    }
}
