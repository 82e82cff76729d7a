//! The content hash of the `check` op: 64-bit FNV-1a over the bytes of the range in address order.
//!
//! ```text
//! h = 0xcbf29ce484222325                      (the FNV-1a 64 offset basis)
//! for each byte b, lowest address first:
//!     h = (h XOR b) * 0x100000001b3  mod 2^64 (the FNV 64 prime)
//! ```
//!
//! An empty range hashes to the offset basis. The hash is a pure function of the byte sequence, so it can be
//! computed in pieces (a page at a time, [`ContentHash::update`]) and gives the same value however the bytes
//! are split. FNV-1a is not cryptographic; it is chosen because it is defined in three lines, has standard
//! test vectors (`""`, `"a"`, `"foobar"`: this module's tests), and any change of a byte or of the order of
//! two different bytes changes it with overwhelming probability for the page contents scripts produce (runs of
//! `fill` bytes and zeros). This is the one implementation: the kernel runner (`vmspace_linux::replay`) hashes
//! what its CPU reads, and the engine's target will hash its page contents with the same code.

/// The FNV-1a 64 offset basis: the hash of the empty byte sequence.
pub const FNV1A_64_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// The FNV 64-bit prime.
pub const FNV1A_64_PRIME: u64 = 0x0000_0100_0000_01b3;

/// An incremental FNV-1a 64 hash (module docs): feed the bytes in address order, in any number of pieces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentHash(u64);

impl Default for ContentHash {
    fn default() -> Self {
        ContentHash::new()
    }
}

impl ContentHash {
    /// The hash of no bytes yet.
    pub const fn new() -> Self {
        ContentHash(FNV1A_64_OFFSET)
    }

    /// Feeds `bytes` (the next bytes of the range, in address order).
    pub fn update(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(FNV1A_64_PRIME);
        }
        self.0 = h;
    }

    /// Feeds `n` copies of `byte`: what a range filled with one value contributes, without a buffer.
    pub fn update_repeated(&mut self, byte: u8, n: u64) {
        let mut h = self.0;
        for _ in 0..n {
            h = (h ^ u64::from(byte)).wrapping_mul(FNV1A_64_PRIME);
        }
        self.0 = h;
    }

    /// The hash of every byte fed so far.
    pub const fn value(&self) -> u64 {
        self.0
    }
}

/// The content hash of `bytes` in one piece.
pub fn content_hash(bytes: &[u8]) -> u64 {
    let mut h = ContentHash::new();
    h.update(bytes);
    h.value()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FNV-1a 64's standard test vectors: `""`, `"a"`, `"foobar"`; and a page of zeros and a page of `0x5a`
    /// (computed by a second, independent implementation when this was written).
    #[test]
    fn known_values() {
        assert_eq!(content_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(content_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(content_hash(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(content_hash(&[0u8; 4096]), 0xb93a_0c83_ce3b_6325);
        assert_eq!(content_hash(&[0x5au8; 4096]), 0x8ab9_e262_b32d_a325);
    }

    /// The hash does not depend on how the bytes are split; repeated bytes hash as the same bytes in a slice.
    #[test]
    fn pieces_and_repeats_agree_with_one_slice() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let whole = content_hash(&bytes);
        for split in [0, 1, 4095, 4096, 4097, 9_999, 10_000] {
            let mut h = ContentHash::new();
            h.update(&bytes[..split]);
            h.update(&bytes[split..]);
            assert_eq!(h.value(), whole, "split at {split}");
        }
        let mut r = ContentHash::new();
        r.update_repeated(0x5a, 4096);
        r.update_repeated(0, 3);
        let mut v = vec![0x5au8; 4096];
        v.extend([0, 0, 0]);
        assert_eq!(r.value(), content_hash(&v));
        // One changed byte, or two different bytes swapped, changes the hash.
        let mut w = bytes.clone();
        w[5000] ^= 1;
        assert_ne!(content_hash(&w), whole);
        let mut s = bytes.clone();
        assert_ne!(s[10], s[11]);
        s.swap(10, 11);
        assert_ne!(content_hash(&s), whole);
    }
}
