//! The experiments, one module each.

pub mod cffs;
pub mod getattr;
pub mod layers;
pub mod meta_scale;
pub mod migrate;
pub mod parity;
pub mod speedup;
pub mod sweep;
pub mod table1;
pub mod tam;
pub mod tpcb;
pub mod web_replay;
pub mod write_mostly;

/// Seven disks, as on Hector.
pub const DISKS: usize = 7;
/// Application reads are 4 KiB pages, as in HFS.
pub const PAGE: usize = 4096;

/// Bytes as a layout size parameter.
pub fn size_param(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{}M", bytes >> 20)
    } else {
        format!("{}K", bytes >> 10)
    }
}

pub fn f0(x: f64) -> String {
    format!("{x:.0}")
}

pub fn f2(x: f64) -> String {
    format!("{x:.2}")
}

/// A deterministic generator (splitmix64): the experiments that draw
/// samples or logs give every system and every run the same ones.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}
