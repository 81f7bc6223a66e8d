//! Random operations on one file through the mount, checked against a
//! model of its bytes after every step, in the manner of fsx (the file
//! system exerciser of BSD and xfstests).
//!
//! Every kind of descriptor a program holds at once works on the same
//! file: read-write (page cache), write-only (written past the page cache
//! where the kernel allows it), read-only, appending, `O_DIRECT`, and
//! shared mappings made and dropped as fsx makes them. Between them go
//! truncations, `fallocate` in each mode, `copy_file_range` within the
//! file, `fsync`, page-cache drops (`POSIX_FADV_DONTNEED`), reopens and
//! remounts. Every read, mapping and `fstat` is compared with the model;
//! the first difference fails the test with the seed, the step and the
//! operations before it.
//!
//! One run per layout family (striped, checksummed, replicated, parity,
//! compressed, inline, co-located, log, regions) on the default mount and
//! on `-o writeback_cache`. `FSX_OPS` sets the steps per run (default
//! 1,500), `FSX_SEED` the first seed.

// A test crate: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::undocumented_unsafe_blocks)]

mod fuse_util;

use fuse_util::oplog::OpLog;
use fuse_util::rng::Rng;
use fuse_util::*;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// The file never grows past this (fsx's default).
const MAX_LEN: u64 = 256 << 10;
/// The largest single read, write or copy.
const MAX_OP: u64 = 64 << 10;
const PAGE: u64 = 4096;

/// A page-aligned buffer for `O_DIRECT`.
struct Aligned {
    raw: Vec<u8>,
    at: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let raw = vec![0u8; len + PAGE as usize];
        let at = raw.as_ptr().align_offset(PAGE as usize);
        Aligned { raw, at, len }
    }
    fn get(&mut self) -> &mut [u8] {
        &mut self.raw[self.at..self.at + self.len]
    }
}

/// The descriptors open on the file.
struct Fds {
    rw: File,
    wo: File,
    ro: File,
    app: File,
    direct: File,
}

impl Fds {
    fn open(p: &Path) -> Fds {
        let o = |f: &mut OpenOptions| f.open(p).unwrap_or_else(|e| panic!("open {}: {e}", p.display()));
        Fds {
            rw: o(OpenOptions::new().read(true).write(true)),
            wo: o(OpenOptions::new().write(true)),
            ro: o(OpenOptions::new().read(true)),
            app: o(OpenOptions::new().append(true)),
            direct: o(OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT)),
        }
    }
}

struct Run {
    rng: Rng,
    model: Vec<u8>,
    path: PathBuf,
    /// None only while the mount is down.
    fds: Option<Fds>,
    log: OpLog,
    /// fallocate modes the mount refused (EOPNOTSUPP): not tried again.
    refused: Vec<i32>,
    /// Whether `copy_file_range` works here (a kernel may refuse it).
    copies: bool,
}

impl Run {
    fn fds(&self) -> &Fds {
        self.fds.as_ref().expect("descriptors open")
    }

    fn fail(&self, why: String) -> ! {
        self.log.fail(why)
    }

    fn note(&mut self, s: String) {
        self.log.note(s);
    }

    fn expect(&self, off: u64, got: &[u8], want_len: usize, how: &str) {
        let end = (off as usize + want_len).min(self.model.len());
        let want = &self.model[(off as usize).min(end)..end];
        if got.len() != want.len() {
            self.fail(format!("{how}: {} bytes at {off}, the model has {}", got.len(), want.len()));
        }
        if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
            self.fail(format!(
                "{how}: byte {} (offset {off} + {i}) is {:#04x}, the model has {:#04x}",
                off as usize + i,
                got[i],
                want[i]
            ));
        }
    }

    fn write_model(&mut self, off: u64, buf: &[u8]) {
        let end = off as usize + buf.len();
        if self.model.len() < end {
            self.model.resize(end, 0);
        }
        self.model[off as usize..end].copy_from_slice(buf);
    }

    fn check_size(&self, how: &str) {
        let len = self.fds().rw.metadata().unwrap().len();
        if len != self.model.len() as u64 {
            self.fail(format!("{how}: fstat says {len} bytes, the model has {}", self.model.len()));
        }
    }

    fn read(&mut self) {
        let size = self.model.len() as u64;
        let off = self.rng.offset(size + PAGE);
        let len = 1 + self.rng.below(MAX_OP);
        let direct = self.rng.below(4) == 0;
        if direct {
            let (off, len) = (off / PAGE * PAGE, len.div_ceil(PAGE) * PAGE);
            self.note(format!("read O_DIRECT {off} +{len}"));
            let mut buf = Aligned::new(len as usize);
            let n = self.fds().direct.read_at(buf.get(), off);
            let n = n.unwrap_or_else(|e| self.fail(format!("O_DIRECT read: {e}")));
            self.expect(off, &buf.get()[..n], len as usize, "O_DIRECT read");
        } else {
            let ro = self.rng.below(2) == 0;
            self.note(format!("read {} {off} +{len}", if ro { "ro" } else { "rw" }));
            let mut buf = vec![0u8; len as usize];
            let f = if ro { &self.fds().ro } else { &self.fds().rw };
            let n = f.read_at(&mut buf, off).unwrap_or_else(|e| self.fail(format!("read: {e}")));
            self.expect(off, &buf[..n], len as usize, "read");
        }
    }

    fn write(&mut self) {
        let off = self.rng.offset(MAX_LEN - 1);
        let len = (1 + self.rng.below(MAX_OP)).min(MAX_LEN - off);
        let which = self.rng.below(5);
        let buf = self.rng.bytes(len as usize);
        match which {
            0 | 1 => {
                self.note(format!("write rw {off} +{len}"));
                self.fds().rw.write_all_at(&buf, off).unwrap_or_else(|e| self.fail(format!("write: {e}")));
                self.write_model(off, &buf);
            }
            2 | 3 => {
                self.note(format!("write wo {off} +{len}"));
                self.fds().wo.write_all_at(&buf, off).unwrap_or_else(|e| self.fail(format!("write-only write: {e}")));
                self.write_model(off, &buf);
            }
            _ => {
                let (off, len) = (off / PAGE * PAGE, len.div_ceil(PAGE) * PAGE);
                let len = len.min(MAX_LEN - off);
                let mut a = Aligned::new(len as usize);
                let buf = self.rng.bytes(len as usize);
                a.get().copy_from_slice(&buf);
                self.note(format!("write O_DIRECT {off} +{len}"));
                let f = &self.fds().direct;
                let n = f.write_at(a.get(), off).unwrap_or_else(|e| self.fail(format!("O_DIRECT write: {e}")));
                if n != len as usize {
                    self.fail(format!("O_DIRECT write: {n} of {len} bytes"));
                }
                self.write_model(off, &buf);
            }
        }
    }

    fn append(&mut self) {
        let room = MAX_LEN - self.model.len() as u64;
        if room == 0 {
            return;
        }
        let len = (1 + self.rng.below(MAX_OP / 4)).min(room);
        let buf = self.rng.bytes(len as usize);
        self.note(format!("append +{len} at {}", self.model.len()));
        use std::io::Write;
        (&self.fds().app).write_all(&buf).unwrap_or_else(|e| self.fail(format!("append: {e}")));
        self.model.extend_from_slice(&buf);
    }

    fn truncate(&mut self) {
        let len = self.rng.offset(MAX_LEN);
        self.note(format!("truncate {} -> {len}", self.model.len()));
        self.fds().rw.set_len(len).unwrap_or_else(|e| self.fail(format!("ftruncate: {e}")));
        self.model.resize(len as usize, 0);
    }

    fn map_read(&mut self) {
        let size = self.model.len() as u64;
        if size == 0 {
            return;
        }
        let off = self.rng.below(size);
        let len = (1 + self.rng.below(MAX_OP)).min(size - off);
        self.note(format!("mapread {off} +{len}"));
        let base = off / PAGE * PAGE;
        let span = (off + len - base) as usize;
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ,
                libc::MAP_SHARED,
                self.fds().ro.as_raw_fd(),
                base as i64,
            )
        };
        if m == libc::MAP_FAILED {
            self.fail(format!("mmap: {}", std::io::Error::last_os_error()));
        }
        let got =
            unsafe { std::slice::from_raw_parts(m.cast::<u8>().add((off - base) as usize), len as usize) }.to_vec();
        assert_eq!(unsafe { libc::munmap(m, span) }, 0);
        self.expect(off, &got, len as usize, "mapped read");
    }

    fn map_write(&mut self) {
        let off = self.rng.offset(MAX_LEN - 1);
        let len = (1 + self.rng.below(MAX_OP)).min(MAX_LEN - off);
        let end = off + len;
        if end > self.model.len() as u64 {
            // A mapping cannot extend a file: fsx grows it first.
            self.note(format!("mapwrite grows {} -> {end}", self.model.len()));
            self.fds().rw.set_len(end).unwrap_or_else(|e| self.fail(format!("ftruncate before mapwrite: {e}")));
            self.model.resize(end as usize, 0);
        }
        let buf = self.rng.bytes(len as usize);
        self.note(format!("mapwrite {off} +{len}"));
        let base = off / PAGE * PAGE;
        let span = (end - base) as usize;
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.fds().rw.as_raw_fd(),
                base as i64,
            )
        };
        if m == libc::MAP_FAILED {
            self.fail(format!("mmap for writing: {}", std::io::Error::last_os_error()));
        }
        unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr(), m.cast::<u8>().add((off - base) as usize), buf.len()) };
        // fsx syncs every mapped write before it unmaps.
        if unsafe { libc::msync(m, span, libc::MS_SYNC) } != 0 {
            self.fail(format!("msync: {}", std::io::Error::last_os_error()));
        }
        assert_eq!(unsafe { libc::munmap(m, span) }, 0);
        self.write_model(off, &buf);
    }

    fn fallocate(&mut self) {
        let modes = [
            0,
            libc::FALLOC_FL_KEEP_SIZE,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            libc::FALLOC_FL_ZERO_RANGE,
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
        ];
        let mode = modes[self.rng.below(modes.len() as u64) as usize];
        if self.refused.contains(&mode) {
            return;
        }
        let off = self.rng.offset(MAX_LEN - 1);
        let len = (1 + self.rng.below(MAX_OP)).min(MAX_LEN - off);
        self.note(format!("fallocate mode {mode:#x} {off} +{len}"));
        let r = unsafe { libc::fallocate(self.fds().rw.as_raw_fd(), mode, off as i64, len as i64) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
                self.note(format!("fallocate mode {mode:#x} not supported"));
                self.refused.push(mode);
                return;
            }
            self.fail(format!("fallocate mode {mode:#x}: {e}"));
        }
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let end = (off + len) as usize;
        if mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0 {
            let z = end.min(self.model.len());
            if (off as usize) < z {
                self.model[off as usize..z].fill(0);
            }
        }
        if !keep && self.model.len() < end {
            self.model.resize(end, 0);
        }
    }

    fn copy_range(&mut self) {
        let size = self.model.len() as u64;
        if size == 0 || !self.copies {
            return;
        }
        let from = self.rng.below(size);
        let len = (1 + self.rng.below(MAX_OP)).min(size - from);
        // Ranges of one file may not overlap.
        let to = self.rng.offset(MAX_LEN - len);
        if to < from + len && from < to + len {
            return;
        }
        self.note(format!("copy_file_range {from} +{len} -> {to}"));
        let (mut fi, mut ti) = (from as i64, to as i64);
        let fd = self.fds().rw.as_raw_fd();
        let mut done = 0u64;
        while done < len {
            let n = unsafe { libc::copy_file_range(fd, &mut fi, fd, &mut ti, (len - done) as usize, 0) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EXDEV | libc::ENOSYS)) && done == 0 {
                    self.note("copy_file_range not supported".into());
                    self.copies = false;
                    return;
                }
                self.fail(format!("copy_file_range: {e}"));
            }
            if n == 0 {
                break;
            }
            done += n as u64;
        }
        if done != len {
            self.fail(format!("copy_file_range copied {done} of {len} bytes"));
        }
        let src = self.model[from as usize..(from + len) as usize].to_vec();
        self.write_model(to, &src);
    }

    fn drop_pages(&mut self) {
        self.note("fsync and drop the file's pages".into());
        self.fds().rw.sync_all().unwrap_or_else(|e| self.fail(format!("fsync: {e}")));
        let r = unsafe { libc::posix_fadvise(self.fds().ro.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(r, 0);
    }

    fn reopen(&mut self) {
        self.note("close every descriptor and open again".into());
        self.fds = None;
        self.fds = Some(Fds::open(&self.path));
    }

    /// The whole file through a new descriptor.
    fn check_whole(&self, how: &str) {
        let got = std::fs::read(&self.path).unwrap_or_else(|e| self.fail(format!("{how}: read: {e}")));
        self.expect(0, &got, self.model.len(), how);
        if got.len() != self.model.len() {
            self.fail(format!("{how}: {} bytes, the model has {}", got.len(), self.model.len()));
        }
    }

    /// `SEEK_DATA` and `SEEK_HOLE` from a random offset: a hole reads as
    /// zeros, and data is where the next non-zero byte is or before it.
    fn seek(&mut self) {
        let size = self.model.len() as u64;
        let off = self.rng.below(size + 1);
        self.note(format!("lseek SEEK_DATA and SEEK_HOLE from {off}"));
        let fd = self.fds().rw.as_raw_fd();
        let data = unsafe { libc::lseek(fd, off as i64, libc::SEEK_DATA) };
        let next_data = self.model[off as usize..].iter().position(|&b| b != 0).map(|i| off + i as u64);
        if data < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENXIO) {
                self.fail(format!("SEEK_DATA: {e}"));
            }
            if let Some(d) = next_data {
                self.fail(format!("SEEK_DATA from {off}: no data, but byte {d} is not zero"));
            }
        } else if data as u64 >= size || next_data.is_some_and(|d| (data as u64) > d) {
            self.fail(format!("SEEK_DATA from {off} gave {data}; the next non-zero byte is {next_data:?} of {size}"));
        }
        let hole = unsafe { libc::lseek(fd, off as i64, libc::SEEK_HOLE) };
        if off == size {
            if hole >= 0 {
                self.fail(format!("SEEK_HOLE at the end ({off}) gave {hole}, not ENXIO"));
            }
        } else if hole < off as i64 || hole as u64 > size {
            self.fail(format!("SEEK_HOLE from {off} gave {hole} in a file of {size}"));
        } else if (hole as u64) < size {
            // The hole reaches to the next data, or the end: zeros.
            let to = unsafe { libc::lseek(fd, hole, libc::SEEK_DATA) };
            let to = if to < 0 { size } else { to as u64 };
            if let Some(i) = self.model[hole as usize..to as usize].iter().position(|&b| b != 0) {
                self.fail(format!(
                    "the hole {hole}..{to} holds byte {:#04x} at {}",
                    self.model[hole as usize + i],
                    hole as usize + i
                ));
            }
        }
    }

    /// A new layout for the file while every descriptor stays open
    /// (online re-layout, HFS 3.4).
    fn relayout(&mut self) {
        let targets: Vec<&str> = LAYOUTS.iter().map(|l| l.1).filter(|l| !l.is_empty()).chain(["extent@3"]).collect();
        let to = targets[self.rng.below(targets.len() as u64) as usize];
        self.note(format!("set the layout {to}"));
        match rustix::fs::setxattr(&self.path, "user.hurricane.layout", to.as_bytes(), rustix::fs::XattrFlags::empty())
        {
            Ok(()) => {}
            // A file larger than an inode holds cannot move inline; it
            // keeps its layout and its bytes.
            Err(rustix::io::Errno::FBIG) if to == "inline" => self.note("refused: too large to be inline".into()),
            Err(e) => self.fail(format!("setting the layout {to}: {e}")),
        }
    }

    fn step(&mut self) {
        match self.rng.below(100) {
            0..=20 => self.read(),
            21..=44 => self.write(),
            45..=50 => self.append(),
            51..=58 => self.truncate(),
            59..=68 => self.map_read(),
            69..=78 => self.map_write(),
            79..=86 => self.fallocate(),
            87..=92 => self.copy_range(),
            93..=94 => self.seek(),
            95..=96 => self.drop_pages(),
            97 => self.relayout(),
            _ => self.reopen(),
        }
        self.check_size("after the step");
    }
}

fn ops() -> usize {
    std::env::var("FSX_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(1500)
}

fn first_seed() -> u64 {
    std::env::var("FSX_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1)
}

/// The layouts of the runs, one directory each.
const LAYOUTS: &[(&str, &str)] = &[
    ("default", ""),
    ("stripe-checksum", "stripe(unit=16K)[checksum[extent@0],checksum[extent@1]]"),
    ("replicate", "replicate(copies=2)[extent@1,extent@2]"),
    ("parity", "parity(data=2,parity=1)[extent@0,extent@1,extent@2]"),
    ("compress", "compress(algo=lz4,chunk=16K)"),
    ("inline", "inline"),
    ("colocate", "colocate"),
    ("log", "log(segment=256K)@1"),
    ("regions", "regions(size=64K,width=2)"),
];

/// A run per layout on one pool mounted with `opts`, with `open` (an open
/// policy) set on its root if given.
fn runs(opts: &[&str], open: Option<&str>, seed0: u64) {
    let pool = Pool::new(4, "512M");
    let mut m = pool.mount(opts);
    let n = ops();
    let mut what_mount = if opts.is_empty() { "default mount".to_string() } else { format!("-o {}", opts.join(",")) };
    if let Some(policy) = open {
        rustix::fs::setxattr(m.path(""), "user.hurricane.open", policy.as_bytes(), rustix::fs::XattrFlags::empty())
            .unwrap();
        what_mount += &format!(", files opened {policy}");
    }
    for (i, (name, layout)) in LAYOUTS.iter().enumerate() {
        if layout.is_empty() {
            std::fs::create_dir(m.path(name)).unwrap();
        } else {
            m.dir_with_layout(name, layout);
        }
        let path = m.path(&format!("{name}/file"));
        File::create(&path).unwrap();
        let seed = seed0 + i as u64;
        let mut r = Run {
            rng: Rng(seed),
            model: Vec::new(),
            fds: Some(Fds::open(&path)),
            path,
            log: OpLog::new(format!("{name} ({what_mount})"), seed),
            refused: Vec::new(),
            copies: true,
        };
        for s in 0..n {
            r.log.step = s;
            r.step();
            // Halfway the mount ends and comes back: what it kept is what
            // was written.
            if s == n / 2 {
                r.note("unmount and mount again".into());
                r.fds = None;
                m.unmount();
                m = pool.mount(opts);
                r.check_whole("after a remount");
                r.fds = Some(Fds::open(&r.path));
            }
        }
        r.check_whole("at the end");
        eprintln!(
            "{}: {n} operations, {} bytes at the end, fallocate modes refused {:?}, copy_file_range {}",
            r.log.what(),
            r.model.len(),
            r.refused,
            if r.copies { "used" } else { "refused" }
        );
    }
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn random_operations_match_the_model() {
    require_fuse!();
    runs(&[], None, first_seed());
}

/// Every file opened `cache=none` (the open policy set on the mount's
/// root): reads and writes of every descriptor reach the mount, mappings
/// included.
#[test]
fn random_operations_match_the_model_with_cache_none_opens() {
    require_fuse!();
    runs(&[], Some("cache=none"), first_seed() + 2000);
}

#[test]
fn random_operations_match_the_model_with_writeback_cache() {
    require_fuse!();
    runs(&["writeback_cache"], None, first_seed() + 1000);
}

/// Threads write one file at once, each in its own 512-byte slices, so
/// every block is shared by all of them: a read-modify-write of a block,
/// a parity row, a compressed chunk or a small-file group that let one
/// thread's write undo another's loses bytes here. Each thread uses a
/// read-write and a write-only descriptor of its own; the file is compared
/// whole at the end and again after a remount.
fn concurrent_writers(opts: &[&str], seed0: u64) {
    const THREADS: u64 = 4;
    const SLICE: u64 = 512;
    const LEN: u64 = 256 << 10;
    let pool = Pool::new(4, "512M");
    let mut m = pool.mount(opts);
    let mut files = Vec::new();
    for (i, (name, layout)) in LAYOUTS.iter().enumerate() {
        if layout.is_empty() {
            std::fs::create_dir(m.path(name)).unwrap();
        } else {
            m.dir_with_layout(name, layout);
        }
        let path = m.path(&format!("{name}/shared"));
        let start = data(LEN as usize, seed0 + i as u64);
        std::fs::write(&path, &start).unwrap();
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let path = path.clone();
                let mut want = start.clone();
                std::thread::spawn(move || {
                    let mut rng = Rng(seed0 * 1000 + i as u64 * 10 + t);
                    let rw = OpenOptions::new().read(true).write(true).open(&path).unwrap();
                    let wo = OpenOptions::new().write(true).open(&path).unwrap();
                    for _ in 0..300 {
                        // A run of this thread's slices, each written in part.
                        let first = rng.below(LEN / SLICE / THREADS) * THREADS + t;
                        let slices = 1 + rng.below(4);
                        for k in 0..slices {
                            let s = first + k * THREADS;
                            if s >= LEN / SLICE {
                                break;
                            }
                            let off = s * SLICE + rng.below(SLICE);
                            let len = 1 + rng.below(s * SLICE + SLICE - off);
                            let buf = rng.bytes(len as usize);
                            let f = if rng.below(2) == 0 { &rw } else { &wo };
                            f.write_all_at(&buf, off).unwrap();
                            want[off as usize..(off + len) as usize].copy_from_slice(&buf);
                        }
                    }
                    want
                })
            })
            .collect();
        let mut whole = start.clone();
        for (t, w) in writers.into_iter().enumerate() {
            let want = w.join().expect("a writer failed");
            for s in (t as u64..LEN / SLICE).step_by(THREADS as usize) {
                let r = (s * SLICE) as usize..((s + 1) * SLICE) as usize;
                whole[r.clone()].copy_from_slice(&want[r]);
            }
        }
        files.push((name, path, whole));
    }
    let check = |when: &str| {
        for (name, path, whole) in &files {
            let got = std::fs::read(path).unwrap();
            if let Some(i) = got.iter().zip(whole.iter()).position(|(a, b)| a != b) {
                panic!("{name}, {when}: byte {i} is {:#04x}, the writers left {:#04x}", got[i], whole[i]);
            }
            assert_eq!(got.len(), whole.len(), "{name}, {when}");
        }
    };
    check("after the writers");
    m.unmount();
    m = pool.mount(opts);
    check("after a remount");
    m.unmount();
    pool.fsck_clean();
}

#[test]
fn concurrent_writers_of_one_file_lose_nothing() {
    require_fuse!();
    concurrent_writers(&[], first_seed());
}

#[test]
fn concurrent_writers_of_one_file_lose_nothing_with_writeback_cache() {
    require_fuse!();
    concurrent_writers(&["writeback_cache"], first_seed() + 1000);
}
