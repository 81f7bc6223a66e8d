//! NUMA distances between the calling CPU and the pool's devices, for
//! `replicate(read=nearest)`.
//!
//! The machine's topology is read once from sysfs: which node each CPU
//! belongs to (`/sys/devices/system/cpu/cpuN/nodeM`) and the distance
//! matrix (`/sys/devices/system/node/nodeM/distance`, the ACPI SLIT: 10
//! local, larger farther). A device's node comes from `pool.conf` (`numa =
//! DEV NODE`) or from sysfs: the `numa_node` of the block device holding it
//! (an image file: the device of its file system), found through
//! `/sys/dev/block/MAJ:MIN` ([`block_device_attr`], which the devices also
//! ask whether a disk is rotational). This module depends on nothing else
//! in the crate.

use std::path::Path;
use std::sync::OnceLock;

/// The distance the kernel reports between a node and itself.
pub const LOCAL: u32 = 10;
/// The distance assumed between two nodes the matrix does not give.
pub const REMOTE: u32 = 20;

struct Topology {
    /// Node of each CPU (index: CPU number), None where unknown.
    cpu_node: Vec<Option<u32>>,
    /// distance[a][b] for the nodes sysfs lists.
    distance: Vec<Vec<u32>>,
}

fn topology() -> &'static Topology {
    static T: OnceLock<Topology> = OnceLock::new();
    T.get_or_init(|| {
        let mut cpu_node = Vec::new();
        if let Ok(dir) = std::fs::read_dir("/sys/devices/system/cpu") {
            for e in dir.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(cpu) = name.strip_prefix("cpu").and_then(|n| n.parse::<usize>().ok()) else { continue };
                let node = std::fs::read_dir(e.path()).ok().and_then(|d| {
                    d.flatten().find_map(|n| {
                        n.file_name().to_string_lossy().strip_prefix("node").and_then(|x| x.parse::<u32>().ok())
                    })
                });
                if cpu_node.len() <= cpu {
                    cpu_node.resize(cpu + 1, None);
                }
                cpu_node[cpu] = node;
            }
        }
        let mut distance = Vec::new();
        for n in 0.. {
            let Ok(text) = std::fs::read_to_string(format!("/sys/devices/system/node/node{n}/distance")) else {
                break;
            };
            distance.push(text.split_whitespace().filter_map(|x| x.parse().ok()).collect());
        }
        Topology { cpu_node, distance }
    })
}

/// The node of the CPU the calling thread runs on, where known.
pub fn current_node() -> Option<u32> {
    let cpu = rustix::thread::sched_getcpu();
    topology().cpu_node.get(cpu).copied().flatten()
}

/// The distance between nodes `a` and `b`: the kernel's matrix, else
/// [`LOCAL`] for a node and itself and [`REMOTE`] between two.
pub fn distance(a: u32, b: u32) -> u32 {
    let m = &topology().distance;
    match m.get(a as usize).and_then(|row| row.get(b as usize)) {
        Some(&d) => d,
        None if a == b => LOCAL,
        None => REMOTE,
    }
}

/// The node of the block device holding `path` (a block device itself, or
/// the file system of an image file), where sysfs says.
pub fn node_of_path(path: &Path) -> Option<u32> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata(path).ok()?;
    let dev = if m.file_type().is_block_device() { m.rdev() } else { m.dev() };
    let text = block_device_attr(dev, "device/numa_node")?;
    text.trim().parse::<i64>().ok().filter(|&n| n >= 0).map(|n| n as u32)
}

/// Attribute `name` (a path under the device's sysfs directory) of block
/// device `dev`, where sysfs has it: in the device's directory or above,
/// so a partition's is its disk's.
pub fn block_device_attr(dev: u64, name: &str) -> Option<String> {
    let (major, minor) = (rustix::fs::major(dev), rustix::fs::minor(dev));
    let sys = std::fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).ok()?;
    sys.ancestors().take(4).find_map(|d| std::fs::read_to_string(d.join(name)).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_are_local_to_themselves() {
        // Every node this machine lists is at the local distance from
        // itself; nodes it does not list are remote from each other.
        for n in 0..topology().distance.len() as u32 {
            assert_eq!(distance(n, n), LOCAL);
        }
        assert_eq!(distance(1000, 1000), LOCAL);
        assert_eq!(distance(1000, 1001), REMOTE);
        if let Some(n) = current_node() {
            assert!((n as usize) < topology().distance.len().max(1) || topology().distance.is_empty());
        }
    }
}
