//! The experiments, one module each.

pub mod getattr;
pub mod layers;
pub mod meta_scale;
pub mod parity;
pub mod speedup;
pub mod sweep;
pub mod table1;
pub mod tam;
pub mod web_replay;

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
