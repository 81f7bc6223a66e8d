// Test helpers: a panic is how a test fails.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]
use hurricane::device::{CrashMode, Device, MemDevice, BLOCK_SIZE};
use hurricane::pool::Superblock;
use hurricane::{FormatOptions, Fs, Options};
use std::sync::Arc;

pub mod ns_model;
pub mod oplog;
pub mod rng;

pub const MB: u64 = 1 << 20;

/// A pool of memory devices that can be "power cut" at any moment.
pub struct MemPool {
    pub devs: Vec<Arc<MemDevice>>,
}

impl MemPool {
    pub fn new(n: usize, size: u64) -> Self {
        Self::with(n, size, &FormatOptions::default())
    }

    pub fn with(n: usize, size: u64, opts: &FormatOptions) -> Self {
        let devs: Vec<Arc<MemDevice>> = (0..n).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), size))).collect();
        Fs::format(Self::dyn_devs(&devs), opts).expect("format");
        MemPool { devs }
    }

    fn dyn_devs(devs: &[Arc<MemDevice>]) -> Vec<Arc<dyn Device>> {
        devs.iter().map(|d| d.clone() as Arc<dyn Device>).collect()
    }

    pub fn open(&self) -> hurricane::Result<Fs> {
        Fs::open(Self::dyn_devs(&self.devs), quiet())
    }

    pub fn open_with(&self, opts: Options) -> hurricane::Result<Fs> {
        Fs::open(Self::dyn_devs(&self.devs), opts)
    }

    /// A pool of memory devices holding these images.
    pub fn from_images(images: Vec<Vec<u8>>) -> MemPool {
        let devs = images
            .into_iter()
            .enumerate()
            .map(|(i, im)| Arc::new(MemDevice::from_image(format!("mem{i}"), im)))
            .collect();
        MemPool { devs }
    }

    /// The pool as a power cut now would leave it.
    pub fn crash(&self, mode: CrashMode) -> MemPool {
        let devs = self
            .devs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let mode = match mode {
                    CrashMode::Random(s) => CrashMode::Random(s.wrapping_add(i as u64 * 7919)),
                    m => m,
                };
                Arc::new(MemDevice::from_image(format!("mem{i}"), d.crash_image(mode)))
            })
            .collect();
        MemPool { devs }
    }
}

/// No background commits: tests decide exactly when things become durable.
pub fn quiet() -> Options {
    Options { background_commit: false, ..Options::default() }
}

/// Deterministic pseudo-random bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The open pool claims no block twice and fsck finds it consistent.
pub fn check_clean(fs: &Fs, what: &str) {
    let r = fs.report();
    assert!(r.double_claims.is_empty(), "{what}: blocks claimed twice: {:?}", r.double_claims);
    let report = hurricane::fsck::check(fs, false, &mut |_, _, _| {}).expect("fsck runs");
    assert!(report.is_clean(), "{what}: fsck: {:?}", report.problems);
}

/// The newest valid superblock of a device image (of its two slots).
pub fn newest_superblock(img: &[u8]) -> Superblock {
    (0..2)
        .filter_map(|s| Superblock::decode(&img[s * BLOCK_SIZE..(s + 1) * BLOCK_SIZE], "img").ok().flatten())
        .max_by_key(|s| s.generation)
        .expect("a valid superblock")
}

/// Offsets of the journal records in a device image (ordered or verified,
/// docs/FORMAT.md): (block, seq).
pub fn journal_records(img: &[u8]) -> Vec<(usize, u64)> {
    let mut out = Vec::new();
    for b in 2..img.len() / BLOCK_SIZE {
        let blk = &img[b * BLOCK_SIZE..(b + 1) * BLOCK_SIZE];
        if &blk[..8] == b"HCJRNL02" || &blk[..8] == b"HCJRNLV2" {
            out.push((b, u64::from_le_bytes(blk[8..16].try_into().unwrap())));
        }
    }
    out
}
