//! Crash images: what the devices hold after a power cut at a given point
//! of the recorded log.
//!
//! A flush makes every earlier write to *its* device durable; writes since a
//! device's last flush sit in its volatile cache and may each, block by
//! block, have reached the medium or not, in any order (a real cache
//! reorders). A crash state is therefore the durable image of each device
//! plus a chosen subset of the pending block writes, applied in log order.

use super::record::Event;
use crate::device::{Device, BLOCK_SIZE};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use rand::{rngs::StdRng, Rng};
use std::collections::HashMap;
use std::sync::Arc;

const BS: u64 = BLOCK_SIZE as u64;

/// The durable images at some position of the log and the writes pending
/// in each device's cache there. Advances monotonically.
pub(crate) struct Durable {
    pub images: Vec<Arc<Vec<u8>>>,
    pos: usize,
    /// Event indices of writes after each device's last flush.
    pending: Vec<Vec<usize>>,
    /// Writes each device's durable image holds: with the base images,
    /// this names the images.
    applied: Vec<usize>,
}

/// Part of one pending write that falls in one device block: the unit a
/// crash keeps or loses.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Piece {
    pub ev: usize,
    pub dev: u32,
    pub off: u64,
    /// Byte range within the write's data.
    pub start: usize,
    pub len: usize,
}

fn apply(img: &mut [u8], off: u64, data: &[u8]) {
    let o = off as usize;
    if let Some(dst) = img.get_mut(o..o + data.len()) {
        dst.copy_from_slice(data);
    }
}

impl Durable {
    pub fn new(images: Vec<Arc<Vec<u8>>>) -> Self {
        let n = images.len();
        Durable { images, pos: 0, pending: vec![Vec::new(); n], applied: vec![0; n] }
    }

    /// Moves to position `p` (the first `p` events have happened).
    pub fn advance(&mut self, events: &[Event], p: usize) {
        debug_assert!(p >= self.pos);
        for i in self.pos..p.min(events.len()) {
            match &events[i] {
                Event::Write { dev, .. } => self.pending[*dev as usize].push(i),
                Event::Flush { dev } => {
                    let d = *dev as usize;
                    let img = Arc::make_mut(&mut self.images[d]);
                    self.applied[d] += self.pending[d].len();
                    for j in self.pending[d].drain(..) {
                        if let Event::Write { off, data, .. } = &events[j] {
                            apply(img, *off, data);
                        }
                    }
                }
            }
        }
        self.pos = self.pos.max(p);
    }

    /// The pending writes cut at block boundaries, in log order.
    pub fn pieces(&self, events: &[Event]) -> Vec<Piece> {
        let mut idx: Vec<usize> = self.pending.iter().flatten().copied().collect();
        idx.sort_unstable();
        let mut out = Vec::new();
        for ev in idx {
            let Event::Write { dev, off, data } = &events[ev] else { continue };
            let mut start = 0usize;
            while start < data.len() {
                let at = off + start as u64;
                let len = ((BS - at % BS) as usize).min(data.len() - start);
                out.push(Piece { ev, dev: *dev, off: at, start, len });
                start += len;
            }
        }
        out
    }

    /// The crash state of the durable images plus the chosen pieces.
    pub fn state(&self, events: &[Event], pieces: &[Piece], keep: &[bool]) -> CrashState {
        let devs: Vec<CrashDevice> =
            self.images.iter().enumerate().map(|(i, img)| CrashDevice::new(format!("crash{i}"), img.clone())).collect();
        for (p, _) in pieces.iter().zip(keep).filter(|(_, k)| **k) {
            if let Event::Write { data, .. } = &events[p.ev] {
                let _ = devs[p.dev as usize].write_at(&data[p.start..p.start + p.len], p.off);
            }
        }
        CrashState { devs, applied: self.applied.clone() }
    }

    /// The whole images of the state [`Durable::state`] gives for the same
    /// pieces kept.
    pub fn whole_images(&self, events: &[Event], pieces: &[Piece], keep: &[bool]) -> Vec<Arc<Vec<u8>>> {
        let mut imgs: Vec<Vec<u8>> = self.images.iter().map(|i| i.to_vec()).collect();
        for (p, _) in pieces.iter().zip(keep).filter(|(_, k)| **k) {
            if let Event::Write { data, .. } = &events[p.ev] {
                apply(&mut imgs[p.dev as usize], p.off, &data[p.start..p.start + p.len]);
            }
        }
        imgs.into_iter().map(Arc::new).collect()
    }
}

/// One crash state: a device over each durable image, the kept pieces
/// written over it.
pub(crate) struct CrashState {
    devs: Vec<CrashDevice>,
    applied: Vec<usize>,
}

impl CrashState {
    /// The key that names the state's contents.
    pub fn key(&self) -> StateKey {
        let mut blocks = Vec::new();
        for (i, d) in self.devs.iter().enumerate() {
            for (blk, b) in d.over.lock().iter() {
                if !d.same_as_base(*blk, b) {
                    blocks.push((i as u32, *blk, fingerprint(b)));
                }
            }
        }
        blocks.sort_unstable();
        StateKey { applied: self.applied.clone(), blocks }
    }

    /// The devices, to open a pool on.
    pub fn devices(self) -> Vec<Arc<dyn Device>> {
        self.devs.into_iter().map(|d| Arc::new(d) as Arc<dyn Device>).collect()
    }
}

/// What a crash state holds, named without its bytes: how many of its
/// writes each device's durable image holds (over the same base images,
/// that fixes the image) and a 96-bit fingerprint of every block the
/// kept pieces changed. Two states with equal keys hold the same bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct StateKey {
    applied: Vec<usize>,
    blocks: Vec<(u32, u64, u128)>,
}

/// A 64-bit hash and a CRC-32C of the block, two functions built
/// differently: 96 bits, so two different blocks share a fingerprint with a
/// chance far below any other failure's.
fn fingerprint(b: &[u8]) -> u128 {
    use std::hash::BuildHasher;
    let h = foldhash::fast::FixedState::with_seed(0x5EED_0001).hash_one(b);
    (u128::from(h) << 32) | u128::from(crc32c::crc32c(b))
}

/// Which pending pieces a simulated power cut keeps.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
    /// Every unflushed write lost.
    Drop,
    /// Every unflushed write made it.
    Keep,
    /// The first `n` pieces in issue order made it (a cache that drains in order).
    Prefix(usize),
    /// Only the last `n` pieces made it (the most reordered cache).
    Suffix(usize),
    /// Each piece independently, with probability `pct`%.
    Random { seed: u64, pct: u32 },
    /// One device's cache drained completely, the others lost theirs.
    Device(u32),
}

impl Mode {
    pub fn keep(&self, pieces: &[Piece]) -> Vec<bool> {
        let n = pieces.len();
        match self {
            Mode::Drop => vec![false; n],
            Mode::Keep => vec![true; n],
            Mode::Prefix(k) => (0..n).map(|i| i < *k).collect(),
            Mode::Suffix(k) => (0..n).map(|i| i + k >= n).collect(),
            Mode::Random { seed, pct } => {
                let mut rng: StdRng = rand::SeedableRng::seed_from_u64(*seed);
                (0..n).map(|_| rng.gen_range(0..100) < *pct).collect()
            }
            Mode::Device(d) => pieces.iter().map(|p| p.dev == *d).collect(),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Drop => write!(f, "drop-unflushed"),
            Mode::Keep => write!(f, "keep-unflushed"),
            Mode::Prefix(n) => write!(f, "in-order-prefix({n})"),
            Mode::Suffix(n) => write!(f, "newest-only({n})"),
            Mode::Random { seed, pct } => write!(f, "random-subset(p={pct}%,seed={seed:#x})"),
            Mode::Device(d) => write!(f, "only-device-{d}-drained"),
        }
    }
}

/// A device over a shared durable image: the blocks a crash state (and the
/// recovery run on it) changed are kept aside, so thousands of states cost
/// no copies of the image.
pub(crate) struct CrashDevice {
    name: String,
    base: Arc<Vec<u8>>,
    over: Mutex<HashMap<u64, Box<[u8]>>>,
}

impl CrashDevice {
    pub fn new(name: String, base: Arc<Vec<u8>>) -> Self {
        CrashDevice { name, base, over: Mutex::new(HashMap::new()) }
    }

    /// Block `blk` as changed is what the durable image holds there.
    fn same_as_base(&self, blk: u64, b: &[u8]) -> bool {
        let s = (blk * BS) as usize;
        let e = (s + BLOCK_SIZE).min(self.base.len());
        b[..e - s] == self.base[s..e] && b[e - s..].iter().all(|x| *x == 0)
    }

    fn span(&self, len: usize, offset: u64) -> Result<()> {
        match offset.checked_add(len as u64) {
            Some(e) if e <= self.base.len() as u64 => Ok(()),
            _ => Err(Error::Device(format!("{}: access past the end", self.name))),
        }
    }
}

impl Device for CrashDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> u64 {
        self.base.len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.span(buf.len(), offset)?;
        let over = self.over.lock();
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let (blk, inb) = (at / BS, (at % BS) as usize);
            let n = (BLOCK_SIZE - inb).min(buf.len() - done);
            let src = match over.get(&blk) {
                Some(b) => &b[inb..inb + n],
                None => &self.base[at as usize..at as usize + n],
            };
            buf[done..done + n].copy_from_slice(src);
            done += n;
        }
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.span(buf.len(), offset)?;
        let mut over = self.over.lock();
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset + done as u64;
            let (blk, inb) = (at / BS, (at % BS) as usize);
            let n = (BLOCK_SIZE - inb).min(buf.len() - done);
            let b = over.entry(blk).or_insert_with(|| {
                let s = (blk * BS) as usize;
                let e = (s + BLOCK_SIZE).min(self.base.len());
                let mut v = self.base[s..e].to_vec();
                v.resize(BLOCK_SIZE, 0);
                v.into_boxed_slice()
            });
            b[inb..inb + n].copy_from_slice(&buf[done..done + n]);
            done += n;
        }
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
}
