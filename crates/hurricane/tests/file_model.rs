//! Random operations on one file through the native API, checked against a
//! model of its bytes after every step, on every layout family: reads,
//! writes, truncations, `fallocate` in every mode the engine has
//! (preallocation, punched holes, zeroed ranges, and the collapsed and
//! inserted ranges that the kernel's FUSE does not pass on), the block map
//! seen through `SEEK_DATA`/`SEEK_HOLE`, migrations to another layout,
//! checkpoints, close and open, and power cuts after a sync, after which
//! the file must be exactly what it was at the sync. `FILE_OPS` sets the
//! steps per layout (default 1,500), `FILE_SEED` the first seed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::oplog::OpLog;
use common::rng::Rng;
use common::*;
use hurricane::device::CrashMode;
use hurricane::fs::MigrateOptions;
use hurricane::{Fs, Options};

const MAX_LEN: u64 = 512 << 10;
const MAX_OP: u64 = 64 << 10;
const BS: u64 = 4096;

const LAYOUTS: &[&str] = &[
    "stripe(unit=16K)",
    "extent@0",
    "stripe(unit=16K)[checksum[extent@0],checksum[extent@1]]",
    "regions(size=64K,width=2)",
    "replicate(copies=2)",
    "parity(data=2,parity=1)",
    "compress(algo=lz4,chunk=16K)",
    "inline",
    "colocate",
    "log(segment=256K)@1",
];

fn opts() -> Options {
    Options { inode_cache: 64, ..quiet() }
}

struct Run {
    rng: Rng,
    pool: MemPool,
    fs: Fs,
    ino: u64,
    model: Vec<u8>,
    /// What the file was at the last sync.
    synced: Vec<u8>,
    log: OpLog,
    /// Collapses and inserts the layout took (it may refuse them).
    moves: usize,
}

impl Run {
    fn fail(&self, why: String) -> ! {
        self.log.fail(why)
    }

    fn note(&mut self, s: String) {
        self.log.note(s);
    }

    fn ok<T>(&self, what: &str, r: hurricane::Result<T>) -> T {
        r.unwrap_or_else(|e| self.fail(format!("{what}: {e}")))
    }

    fn compare(&self, off: u64, got: &[u8], how: &str) {
        let end = (off as usize + got.len()).min(self.model.len());
        let want = &self.model[(off as usize).min(end)..end];
        if got.len() != want.len() {
            self.fail(format!("{how}: {} bytes at {off}, the model has {}", got.len(), want.len()));
        }
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            self.fail(format!("{how}: byte {} is {:#04x}, the model has {:#04x}", off as usize + i, got[i], want[i]));
        }
    }

    fn check_whole(&self, how: &str) {
        let size = self.ok("getattr", self.fs.getattr(self.ino)).size;
        if size != self.model.len() as u64 {
            self.fail(format!("{how}: size {size}, the model has {}", self.model.len()));
        }
        let mut buf = vec![0u8; self.model.len()];
        let n = self.ok("read", self.fs.read(self.ino, 0, &mut buf));
        self.compare(0, &buf[..n], how);
    }

    fn read(&mut self) {
        let off = self.rng.offset(self.model.len() as u64 + BS);
        let len = 1 + self.rng.below(MAX_OP);
        self.note(format!("read {off} +{len}"));
        let mut buf = vec![0u8; len as usize];
        let n = self.ok("read", self.fs.read(self.ino, off, &mut buf));
        self.compare(off, &buf[..n], "read");
    }

    fn write(&mut self) {
        let off = self.rng.offset(MAX_LEN - 1);
        let len = (1 + self.rng.below(MAX_OP)).min(MAX_LEN - off);
        let buf = self.rng.bytes(len as usize);
        self.note(format!("write {off} +{len}"));
        let n = self.ok("write", self.fs.write(self.ino, off, &buf));
        if n != buf.len() {
            self.fail(format!("write: {n} of {len} bytes"));
        }
        let end = (off + len) as usize;
        if self.model.len() < end {
            self.model.resize(end, 0);
        }
        self.model[off as usize..end].copy_from_slice(&buf);
    }

    fn truncate(&mut self) {
        let len = self.rng.offset(MAX_LEN);
        self.note(format!("truncate {} -> {len}", self.model.len()));
        self.ok("truncate", self.fs.truncate(self.ino, len));
        self.model.resize(len as usize, 0);
    }

    fn fallocate(&mut self) {
        let size = self.model.len() as u64;
        let modes = [
            0,
            libc::FALLOC_FL_KEEP_SIZE,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            libc::FALLOC_FL_ZERO_RANGE,
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            libc::FALLOC_FL_COLLAPSE_RANGE,
            libc::FALLOC_FL_INSERT_RANGE,
        ];
        let mode = modes[self.rng.below(modes.len() as u64) as usize];
        let moving = mode & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE) != 0;
        let (off, len) = if moving {
            // Whole blocks, inside the file.
            let blocks = size / BS;
            if blocks < 2 {
                return;
            }
            let off = self.rng.below(blocks - 1) * BS;
            let len = (1 + self.rng.below((blocks - off / BS - 1).min(MAX_OP / BS))) * BS;
            if mode == libc::FALLOC_FL_INSERT_RANGE && size + len > MAX_LEN {
                return;
            }
            (off, len)
        } else {
            let off = self.rng.offset(MAX_LEN - 1);
            (off, (1 + self.rng.below(MAX_OP)).min(MAX_LEN - off))
        };
        self.note(format!("fallocate mode {mode:#x} {off} +{len} (size {size})"));
        let r = self.fs.fallocate(self.ino, off, len, mode);
        if moving {
            if let Err(e) = &r {
                if e.errno() == libc::EOPNOTSUPP {
                    // The layout cannot move its mappings: nothing changed.
                    self.note(format!("refused: {e}"));
                    return;
                }
            }
        }
        self.ok(&format!("fallocate mode {mode:#x}"), r);
        let end = (off + len) as usize;
        match mode {
            libc::FALLOC_FL_COLLAPSE_RANGE => {
                self.model.drain(off as usize..end);
                self.moves += 1;
            }
            libc::FALLOC_FL_INSERT_RANGE => {
                self.model.splice(off as usize..off as usize, std::iter::repeat_n(0, len as usize));
                self.moves += 1;
            }
            _ => {
                if mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0 {
                    let z = end.min(self.model.len());
                    if (off as usize) < z {
                        self.model[off as usize..z].fill(0);
                    }
                }
                if mode & libc::FALLOC_FL_KEEP_SIZE == 0 && self.model.len() < end {
                    self.model.resize(end, 0);
                }
            }
        }
    }

    /// The block map: a hole reads as zeros and no non-zero byte is
    /// skipped.
    fn seek(&mut self) {
        let size = self.model.len() as u64;
        let off = self.rng.below(size + 1);
        self.note(format!("seek data and hole from {off}"));
        let data = self.ok("SEEK_DATA", self.fs.seek_data_hole(self.ino, off, true));
        let next = self.model[off as usize..].iter().position(|&b| b != 0).map(|i| off + i as u64);
        match (data, next) {
            (None, Some(d)) => self.fail(format!("SEEK_DATA from {off}: none, but byte {d} is not zero")),
            (Some(d), n) if d >= size || n.is_some_and(|n| d > n) || d < off => {
                self.fail(format!("SEEK_DATA from {off} gave {d}; the next non-zero byte is {n:?} of {size}"))
            }
            _ => {}
        }
        let hole = self.ok("SEEK_HOLE", self.fs.seek_data_hole(self.ino, off, false));
        match hole {
            None if off < size => self.fail(format!("SEEK_HOLE from {off} gave none in a file of {size}")),
            Some(h) if h < off || h > size => self.fail(format!("SEEK_HOLE from {off} gave {h} in a file of {size}")),
            Some(h) if h < size => {
                let to = self.ok("SEEK_DATA", self.fs.seek_data_hole(self.ino, h, true)).unwrap_or(size);
                if let Some(i) = self.model[h as usize..to as usize].iter().position(|&b| b != 0) {
                    self.fail(format!("the hole {h}..{to} holds a non-zero byte at {}", h as usize + i));
                }
            }
            _ => {}
        }
    }

    fn migrate(&mut self) {
        let to = LAYOUTS[self.rng.below(LAYOUTS.len() as u64) as usize];
        self.note(format!("migrate to {to}"));
        let r = self.fs.migrate(self.ino, to, &MigrateOptions::default(), &|_| {});
        match r {
            Ok(_) => {}
            // A file larger than an inode holds cannot move inline.
            Err(e) if to == "inline" && e.errno() == libc::EFBIG => self.note(format!("refused: {e}")),
            Err(e) => self.fail(format!("migrating to {to}: {e}")),
        }
    }

    fn reopen(&mut self) {
        self.note("close and open".into());
        self.ok("close", self.fs.close());
        self.fs = self.ok("open", self.pool.open_with(opts()));
        self.check_whole("after a reopen");
    }

    fn power_cut(&mut self) {
        self.note("sync, more writes, then a power cut".into());
        self.ok("sync", self.fs.sync());
        self.synced = self.model.clone();
        // Unsynced changes the cut may lose in part: the file must then be
        // as it was at the sync, or (if they all made it) as it is now.
        let after = self.rng.below(3);
        for _ in 0..after {
            self.write();
        }
        let cut = self.pool.crash(CrashMode::DropAll);
        let fs = self.ok("open after a power cut", cut.open_with(opts()));
        drop(std::mem::replace(&mut self.fs, fs));
        self.pool = cut;
        self.model = self.synced.clone();
        self.check_whole("after a power cut");
    }

    fn step(&mut self) {
        match self.rng.below(100) {
            0..=24 => self.read(),
            25..=52 => self.write(),
            53..=61 => self.truncate(),
            62..=79 => self.fallocate(),
            80..=86 => self.seek(),
            87..=89 => self.migrate(),
            90..=95 => {
                self.note("checkpoint".into());
                self.ok("checkpoint", self.fs.checkpoint());
            }
            96..=97 => self.reopen(),
            _ => self.power_cut(),
        }
        let size = self.ok("getattr", self.fs.getattr(self.ino)).size;
        if size != self.model.len() as u64 {
            self.fail(format!("size {size}, the model has {}", self.model.len()));
        }
    }
}

#[test]
fn random_operations_on_every_layout_match_the_model() {
    let steps: usize = std::env::var("FILE_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(1500);
    let first: u64 = std::env::var("FILE_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    for (i, layout) in LAYOUTS.iter().enumerate() {
        let seed = first + i as u64;
        let pool = MemPool::new(4, 16 * MB);
        let fs = pool.open_with(opts()).unwrap();
        fs.write_file("/f", b"", Some(layout)).unwrap();
        let ino = fs.resolve("/f").unwrap();
        let mut r = Run {
            rng: Rng(seed),
            pool,
            fs,
            ino,
            model: Vec::new(),
            synced: Vec::new(),
            log: OpLog::new(layout.to_string(), seed),
            moves: 0,
        };
        for s in 0..steps {
            r.log.step = s;
            r.step();
        }
        r.check_whole("at the end");
        check_clean(&r.fs, layout);
        eprintln!("{layout}: {steps} steps, {} bytes at the end, {} collapses and inserts", r.model.len(), r.moves);
        r.fs.close().unwrap();
    }
}
