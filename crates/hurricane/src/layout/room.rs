//! How much a new file of a resolved layout can hold, given each device's
//! free blocks: the space statfs offers as available (`f_bavail`), which a
//! file of the pool's default layout must be able to take whole. Each type
//! says what holding `n` file blocks takes of each device ([`demand`]); the
//! room is the most blocks whose demand fits every device ([`room`]).
//! Types this module does not know are counted as taking `n` blocks on
//! each child, more than any of them takes, so the room is never
//! overstated.

use super::Spec;
use crate::blocks::{registry::lookup, Value};
use crate::device::BLOCK_SIZE;

/// A numeric parameter of `s` in bytes or as a count, its default where
/// the spec (canonical: defaults left out) does not give it.
fn param(s: &Spec, key: &str) -> Option<u64> {
    if let Some((_, v)) = s.params.iter().find(|(k, _)| k == key) {
        return match v {
            Value::Num(n) => Some(*n),
            Value::Word(w) => crate::units::parse_size(w).ok(),
        };
    }
    let d = lookup(&s.kind)?.params.iter().find(|p| p.key == key)?.default?;
    crate::units::parse_size(d).ok()
}

/// `bytes` in whole blocks, at least one.
fn blocks(bytes: u64) -> u64 {
    (bytes / BLOCK_SIZE as u64).max(1)
}

/// Adds to `need[d]` the blocks of device `d` a new file of `s` takes to
/// hold `n` file blocks (meta-data aside: it has its own reserve).
pub fn demand(s: &Spec, n: u64, need: &mut Vec<u64>) {
    let mut add = |d: u32, b: u64| {
        let d = d as usize;
        if need.len() <= d {
            need.resize(d + 1, 0);
        }
        need[d] = need[d].saturating_add(b);
    };
    let w = s.children.len() as u64;
    match s.kind.as_str() {
        // Data in the meta-data record: no device space.
        "inline" => {}
        // One run after another on its device.
        "extent" | "colocate" => {
            if let Some(d) = s.device {
                add(d, n);
            }
        }
        // A summary block in front of each piece (at most every 32
        // blocks for small pieces: counted for every 32).
        "log" => {
            if let Some(d) = s.device {
                add(d, n.saturating_add(n.div_ceil(32)));
            }
        }
        // Round robin in units: child i holds unit i, i + w, ...
        "stripe" | "write-mostly" if w > 0 => {
            let unit = param(s, "unit").map_or(1, blocks);
            let round = unit.saturating_mul(w);
            let (full, rest) = (n / round, n % round);
            for (i, c) in s.children.iter().enumerate() {
                let part = rest.saturating_sub(i as u64 * unit).min(unit);
                demand(c, full * unit + part, need);
            }
        }
        // Regions of `size` bytes, one per child in turn.
        "regions" if w > 0 => {
            let size = param(s, "size").map_or(1, blocks);
            let round = size.saturating_mul(w);
            let (full, rest) = (n / round, n % round);
            for (i, c) in s.children.iter().enumerate() {
                let part = rest.saturating_sub(i as u64 * size).min(size);
                demand(c, full * size + part, need);
            }
        }
        // Every stripe of `data` units has a unit on every child, parity
        // ones included.
        "parity" if w > 0 => {
            let unit = param(s, "unit").map_or(1, blocks);
            let k = param(s, "data").unwrap_or(w).clamp(1, w);
            let stripes = n.div_ceil(unit.saturating_mul(k));
            for c in &s.children {
                demand(c, stripes.saturating_mul(unit), need);
            }
        }
        // A full copy on each child; checksums and compressed chunks
        // (stored raw where compression saves nothing) take the child's
        // blocks, their indexes the meta-data's; any other type, every
        // child as much as the file.
        _ => {
            for c in &s.children {
                demand(c, n, need);
            }
        }
    }
}

/// The most file blocks a new file of `s` can hold when device `d` has
/// `free[d]` blocks free for data (none past the end of `free`).
pub fn room(s: &Spec, free: &[u64]) -> u64 {
    let fits = |n: u64| {
        let mut need = Vec::new();
        demand(s, n, &mut need);
        need.iter().enumerate().all(|(d, &b)| b <= free.get(d).copied().unwrap_or(0))
    };
    // Demand grows with n: the largest n that fits, by bisection. No file
    // holds more than every free block.
    let (mut lo, mut hi) = (0u64, free.iter().sum::<u64>());
    if fits(hi) {
        return hi;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> Spec {
        crate::layout::parse(text).unwrap()
    }

    #[test]
    fn the_room_of_each_shape() {
        // A stripe of 1 MiB units (256 blocks) is full when one child is:
        // three rounds (768 blocks a child), then 232 more on the first.
        let s = spec("stripe(unit=1M)[checksum[extent@0],checksum[extent@1],checksum[extent@2],checksum[extent@3]]");
        assert_eq!(room(&s, &[1000, 1000, 1000, 5000]), 3 * 1024 + 232);
        // Two rounds, a unit on the first child and 188 on the second.
        assert_eq!(room(&s, &[1000, 700, 1000, 1000]), 2 * 1024 + 256 + 188);
        // Copies: the least free.
        let r = spec("replicate(copies=2)[extent@0,extent@2]");
        assert_eq!(room(&r, &[700, 0, 500]), 500);
        // data + parity: k of every k + m units hold data.
        let p = spec("parity(data=3,parity=1)[extent@0,extent@1,extent@2,extent@3]");
        assert_eq!(room(&p, &[1000, 1000, 1000, 1000]), 3000);
        assert_eq!(room(&p, &[1000, 1000, 1000, 10]), 30);
        // A device shared by two subtrees counts both.
        let twice = spec("replicate(copies=2)[extent@0,extent@0]");
        assert_eq!(room(&twice, &[1000]), 500);
        assert_eq!(room(&spec("extent@1"), &[5, 7]), 7);
        assert_eq!(room(&spec("extent@3"), &[5, 7]), 0);
        // The log's summaries.
        assert_eq!(room(&spec("log@0"), &[33]), 32);
    }
}
