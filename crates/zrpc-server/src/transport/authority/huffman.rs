//! HPACK's static Huffman code (RFC 7541 §5.2, Appendix B): decoding, encoding and encoded length.
//!
//! Written here rather than taken from `h2` because `h2::hpack` is private (only behind its
//! semver-exempt `unstable` feature) and the rewrite needs byte positions, which no HPACK
//! crate exposes. Only connections whose `:authority` has to be repaired ever get here.

use std::sync::LazyLock;

use super::huffman_table::{CODES, EOS};

/// A malformed Huffman string: EOS inside it, or padding that is not a prefix of EOS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;

/// The decoding tree: node 0 is the root; a child is either another node index or a leaf
/// (`LEAF | symbol`). `0` marks a missing child (the root is never a child).
static TREE: LazyLock<Vec<[u16; 2]>> = LazyLock::new(|| {
    let mut nodes = vec![[0u16; 2]];
    let codes = CODES.iter().copied().chain(std::iter::once(EOS));
    for (symbol, (code, len)) in codes.enumerate() {
        let mut node = 0usize;
        for i in (0..len).rev() {
            let bit = ((code >> i) & 1) as usize;
            if i == 0 {
                nodes[node][bit] = LEAF | symbol as u16;
            } else {
                if nodes[node][bit] == 0 {
                    nodes.push([0; 2]);
                    nodes[node][bit] = (nodes.len() - 1) as u16;
                }
                node = nodes[node][bit] as usize;
            }
        }
    }
    nodes
});

const LEAF: u16 = 0x8000;
const EOS_SYMBOL: u16 = 256;

/// Decodes `input`, handing each octet to `out`.
pub(crate) fn decode(input: &[u8], mut out: impl FnMut(u8)) -> Result<(), Malformed> {
    let tree = &*TREE;
    let mut node = 0usize;
    // Bits read since the last complete symbol, and whether they were all ones.
    let mut pending = 0u32;
    let mut all_ones = true;
    for &byte in input {
        for i in (0..8).rev() {
            let bit = ((byte >> i) & 1) as usize;
            pending += 1;
            all_ones &= bit == 1;
            let next = tree[node][bit];
            if next & LEAF != 0 {
                let symbol = next & !LEAF;
                if symbol == EOS_SYMBOL {
                    return Err(Malformed);
                }
                out(symbol as u8);
                node = 0;
                pending = 0;
                all_ones = true;
            } else if next == 0 {
                return Err(Malformed);
            } else {
                node = next as usize;
            }
        }
    }
    if pending > 7 || !all_ones {
        return Err(Malformed);
    }
    Ok(())
}

/// The number of octets `input` encodes to.
pub(crate) fn encoded_len(input: &[u8]) -> usize {
    let bits: usize = input.iter().map(|&b| CODES[b as usize].1 as usize).sum();
    bits.div_ceil(8)
}

/// The code length in bits of octet `b`.
pub(crate) fn code_len(b: u8) -> u8 {
    CODES[b as usize].1
}

/// Huffman-encodes `input` into `out` (which must be exactly [`encoded_len`] long), padding
/// the last octet with ones (the EOS prefix).
pub(crate) fn encode_into(input: &[u8], out: &mut [u8]) {
    debug_assert_eq!(out.len(), encoded_len(input));
    let mut acc = 0u64;
    let mut bits = 0u32;
    let mut pos = 0;
    for &b in input {
        let (code, len) = CODES[b as usize];
        acc = (acc << len) | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            out[pos] = (acc >> bits) as u8;
            pos += 1;
        }
        acc &= (1u64 << bits) - 1;
    }
    if bits > 0 {
        out[pos] = ((acc << (8 - bits)) | ((1u64 << (8 - bits)) - 1)) as u8;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn decode_vec(input: &[u8]) -> Result<Vec<u8>, Malformed> {
        let mut v = Vec::new();
        decode(input, |b| v.push(b)).map(|()| v)
    }

    fn encode_vec(input: &[u8]) -> Vec<u8> {
        let mut out = vec![0; encoded_len(input)];
        encode_into(input, &mut out);
        out
    }

    /// RFC 7541 Appendix C.4 / C.6 Huffman examples.
    #[test]
    fn rfc7541_examples_round_trip() {
        let cases: &[(&str, &str)] = &[
            ("www.example.com", "f1e3c2e5f23a6ba0ab90f4ff"),
            ("no-cache", "a8eb10649cbf"),
            ("custom-key", "25a849e95ba97d7f"),
            ("custom-value", "25a849e95bb8e8b4bf"),
            ("302", "6402"),
            ("private", "aec3771a4b"),
            (
                "Mon, 21 Oct 2013 20:13:21 GMT",
                "d07abe941054d444a8200595040b8166e082a62d1bff",
            ),
            (
                "https://www.example.com",
                "9d29ad171863c78f0b97c8e9ae82ae43d3",
            ),
        ];
        for (plain, hex) in cases {
            let encoded: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            assert_eq!(encode_vec(plain.as_bytes()), encoded, "{plain}");
            assert_eq!(decode_vec(&encoded).unwrap(), plain.as_bytes(), "{plain}");
        }
    }

    #[test]
    fn rejects_bad_padding_and_eos() {
        // '0' is 00000 (5 bits); padding with zeros is not an EOS prefix.
        assert_eq!(decode_vec(&[0b0000_0000]), Err(Malformed));
        assert_eq!(decode_vec(&[0b0000_0111]).unwrap(), b"0");
        // A whole octet of padding is too long.
        assert_eq!(decode_vec(&[0b0000_0111, 0xff]), Err(Malformed));
        // EOS itself (30 ones) must not appear.
        assert_eq!(decode_vec(&[0xff, 0xff, 0xff, 0xff]), Err(Malformed));
    }

    proptest! {
        #[test]
        fn round_trips_any_octets(input in proptest::collection::vec(any::<u8>(), 0..64)) {
            let encoded = encode_vec(&input);
            prop_assert_eq!(decode_vec(&encoded).unwrap(), input);
        }

        #[test]
        fn decoding_garbage_never_panics(input in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_vec(&input);
        }
    }
}
