//! What the block tests share: memory devices with allocators and a
//! change log (`Env`), and helpers to build, fill and encode layouts.

use super::*;
use crate::device::{Device, DeviceHandle, MemDevice};
use crate::pool::{Allocator, Storage};
use parking_lot::Mutex;
use rand::{rngs::StdRng, Rng, SeedableRng};

pub(super) const BS: usize = BLOCK_SIZE;

/// First device block handed out (block 0 stands for a superblock).
pub(super) const FIRST: u64 = 1;

/// Devices, their allocators, and the records requests made.
pub(super) struct Env {
    pub storage: Storage,
    pub log: Mutex<Vec<NodeRecord>>,
}

impl Env {
    pub fn new(ndev: u32, blocks: u64) -> Env {
        let devs = (0..ndev)
            .map(|i| Arc::new(MemDevice::new(format!("mem:{i}"), blocks * BS as u64)) as Arc<dyn Device>)
            .collect();
        Env::with(devs)
    }
    pub fn with(devs: Vec<Arc<dyn Device>>) -> Env {
        let allocs = devs.iter().map(|d| Allocator::new(FIRST, d.size() / BS as u64)).collect();
        let devs = devs.into_iter().enumerate().map(|(i, d)| DeviceHandle::new(i as u32, d)).collect();
        Env { storage: Storage { devs, allocs }, log: Mutex::new(Vec::new()) }
    }
    pub fn io<T>(&self, f: impl FnOnce(&IoCtx) -> T) -> T {
        let sink = |c: NodeRecord| self.log.lock().push(c);
        f(&IoCtx {
            owner: 0,
            origin: crate::blocks::Origin::NONE,
            storage: &self.storage,
            epoch: 1,
            sink: &sink,
            repair: true,
        })
    }
    pub fn write(&self, l: &Layout, fblk: u64, data: &[u8]) -> Result<()> {
        self.io(|io| l.root().write(io, fblk, data))
    }
    pub fn try_read(&self, l: &Layout, fblk: u64, n: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0xAA; n * BS];
        self.io(|io| l.root().read(io, fblk, &mut buf)).map(|()| buf)
    }
    pub fn read(&self, l: &Layout, fblk: u64, n: usize) -> Vec<u8> {
        self.try_read(l, fblk, n).unwrap()
    }
    pub fn truncate(&self, l: &Layout, n: u64) {
        self.io(|io| l.root().truncate(io, n)).unwrap();
    }
    pub fn changes(&self) -> Vec<NodeRecord> {
        self.log.lock().clone()
    }
    /// The requests' journal batch commits: deferred frees become free.
    pub fn commit(&self) {
        for a in &self.storage.allocs {
            a.release(u64::MAX);
        }
    }
    /// Device blocks handed out on every device.
    pub fn used(&self) -> u64 {
        self.storage.allocs.iter().map(|a| a.total_blocks() - FIRST - a.free_blocks()).sum()
    }
    /// Every device block is either free or owned by exactly one extent of
    /// `layouts`, once deferred frees are released.
    pub fn check_accounting(&self, layouts: &[&Layout]) {
        let mut owned: Vec<Vec<(u64, u64)>> = vec![Vec::new(); self.storage.devs.len()];
        for l in layouts {
            l.extents(&mut |d, p, n| owned[d as usize].push((p, n)));
        }
        // The log heads' blocks not handed out yet.
        for (d, h) in self.storage.devs.iter().enumerate() {
            if let Some(s) = h.shared_if::<log::LogSpace>() {
                s.unused(&mut |p, n| owned[d].push((p, n)));
            }
        }
        for (d, a) in self.storage.allocs.iter().enumerate() {
            a.release(u64::MAX);
            let mut all = owned[d].clone();
            all.extend(a.free_extents());
            all.sort_unstable();
            let mut pos = FIRST;
            for (s, n) in all {
                assert_eq!(s, pos, "device {d}: block {pos} leaked or claimed twice");
                pos = s + n;
            }
            assert_eq!(pos, a.total_blocks(), "device {d}: blocks leaked at the end");
        }
    }
}

pub(super) fn build(s: &Spec) -> Layout {
    Layout::build(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// Random bytes, `nblocks` blocks of them, the same for the same seed.
pub(super) fn pattern(seed: u64, nblocks: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..nblocks * BS).map(|_| rng.gen()).collect()
}

pub(super) fn encode(l: &Layout) -> Vec<u8> {
    let mut e = crate::codec::Encoder::new();
    l.encode(&mut e);
    e.into_inner()
}

pub(super) fn decode(b: &[u8]) -> Result<Layout> {
    Layout::decode(&mut crate::codec::Decoder::new(b, "layout"))
}
