//! The seeded stream of the random-operation tests (splitmix64: the same
//! on every machine), with the offsets and bytes they draw. Shared by the
//! engine's tests and the mount's (`fuse_util` includes this file).

/// Blocks and pages: where offsets are drawn often.
const PAGE: u64 = 4096;

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// An index into a slice of `n` things (0 when `n` is 0).
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// An offset or length up to `limit`: mostly anywhere, often on a page
    /// boundary or just off one, where block and page logic splits.
    pub fn offset(&mut self, limit: u64) -> u64 {
        let o = self.below(limit + 1);
        match self.below(4) {
            0 => (o / PAGE * PAGE).min(limit),
            1 => (o / PAGE * PAGE).saturating_sub(1).min(limit),
            _ => o,
        }
    }

    /// Bytes to write: runs of one byte with a few others among them, or
    /// noise, so compressed layouts store both kinds of chunk.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        if self.below(2) == 0 {
            let mut v = vec![self.next() as u8; n];
            for i in (0..n).step_by(97) {
                v[i] = self.next() as u8;
            }
            v
        } else {
            let mut v = Vec::with_capacity(n + 8);
            while v.len() < n {
                v.extend_from_slice(&self.next().to_le_bytes());
            }
            v.truncate(n);
            v
        }
    }
}
