//! Random namespace operations through a real mount, checked against a
//! model: the kernel's dentry and attribute caches and the mount's own
//! name and negative-entry caches stand between every call and the
//! engine, and none may show a name, a link count or a listing that is no
//! longer so.
//!
//! Creates, mkdir, symlinks, hard links, unlink, rmdir and renameat2
//! (plain, `RENAME_NOREPLACE`, `RENAME_EXCHANGE`) on a few names in a few
//! directories; `lstat` of random names (inode, type, link count, a
//! symlink's target); whole listings; listings read a few entries a
//! `getdents64` call while the directory changes; an unmount and mount; and
//! a killed server after `fsync` of every directory, after which everything
//! must be as it was. `NSM_OPS` sets the steps (default 2,500), `NSM_SEED`
//! the seed.

// A test crate: a panic is how a test fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::undocumented_unsafe_blocks)]

mod fuse_util;

use fuse_util::ns_model::{Change, Ino, Kind, Model};
use fuse_util::oplog::OpLog;
use fuse_util::rng::Rng;
use fuse_util::*;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirEntryExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;

const NAMES: &[&str] = &["a", "b", "c", "dd", "e", "f0", "long-name-with-some-length", "x.y"];
const MAX_DIRS: usize = 16;

fn code<T>(r: &std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

struct Run {
    rng: Rng,
    pool: Pool,
    mounted: Option<Mounted>,
    m: Model,
    log: OpLog,
    opts: Vec<&'static str>,
}

impl Run {
    fn fail(&self, why: String) -> ! {
        self.log.fail(why)
    }

    fn note(&mut self, s: String) {
        self.log.note(s);
    }

    /// A directory's path through the mount.
    fn path(&self, d: Ino) -> PathBuf {
        if d == self.m.root {
            return self.pool.mnt.clone();
        }
        let p = self.m.nodes[&d].parent;
        let name = self.m.nodes[&p].entries.iter().find(|(_, i)| **i == d).map(|(n, _)| n.clone()).unwrap();
        self.path(p).join(OsStr::from_bytes(&name))
    }

    fn at(&self, d: Ino, name: &[u8]) -> PathBuf {
        self.path(d).join(OsStr::from_bytes(name))
    }

    fn pick(&mut self) -> (Ino, Vec<u8>) {
        let d = self.m.dirs();
        let d = d[self.rng.index(d.len())];
        (d, NAMES[self.rng.index(NAMES.len())].as_bytes().to_vec())
    }

    /// Checks a result against what the model says must happen; true
    /// when the call succeeded and changed the namespace.
    fn outcome(&self, what: &str, got: i32, want: Result<(), Vec<i32>>) -> bool {
        let allowed = want.clone().err().unwrap_or_else(|| vec![0]);
        if !allowed.contains(&got) {
            self.fail(format!("{what}: errno {got}, expected one of {allowed:?}"));
        }
        want.is_ok()
    }

    fn create(&mut self, kind: usize) {
        let (d, n) = self.pick();
        if kind == 1 && self.m.dirs().len() >= MAX_DIRS {
            return;
        }
        let p = self.at(d, &n);
        let target = format!("target-{}", self.rng.below(1000));
        self.note(format!("{} {}", ["create", "mkdir", "symlink"][kind], p.display()));
        let r = match kind {
            0 => fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&p).map(drop),
            1 => fs::create_dir(&p),
            _ => std::os::unix::fs::symlink(&target, &p),
        };
        if self.outcome("create", code(&r), self.m.create(d, &n)) {
            let ino = fs::symlink_metadata(&p).unwrap_or_else(|e| self.fail(format!("lstat after create: {e}"))).ino();
            if self.m.nodes.contains_key(&ino) {
                self.fail(format!("a new name got inode {ino}, which is live"));
            }
            let k = [Kind::File, Kind::Dir, Kind::Symlink(target.into_bytes())].into_iter().nth(kind).unwrap();
            self.m.created(d, &n, ino, k);
        }
    }

    fn remove(&mut self, dir: bool) {
        let (d, n) = self.pick();
        let p = self.at(d, &n);
        self.note(format!("{} {}", if dir { "rmdir" } else { "unlink" }, p.display()));
        let r = if dir { fs::remove_dir(&p) } else { fs::remove_file(&p) };
        if self.outcome("remove", code(&r), self.m.remove(d, &n, dir)) {
            self.m.removed(d, &n);
        }
    }

    fn link(&mut self) {
        let (sd, sn) = self.pick();
        let Some(i) = self.m.entry(sd, &sn) else { return };
        let (d, n) = self.pick();
        let (from, to) = (self.at(sd, &sn), self.at(d, &n));
        self.note(format!("link {} {}", from.display(), to.display()));
        let r = fs::hard_link(&from, &to);
        if self.outcome("link", code(&r), self.m.link(i, d, &n)) {
            self.m.linked(i, d, &n);
        }
    }

    fn rename(&mut self) {
        let ((sd, sn), (dd, dn)) = (self.pick(), self.pick());
        let flags: u32 = match self.rng.below(4) {
            0 => libc::RENAME_NOREPLACE,
            1 => libc::RENAME_EXCHANGE,
            _ => 0,
        };
        let (from, to) = (self.at(sd, &sn), self.at(dd, &dn));
        self.note(format!("rename {} {} flags {flags}", from.display(), to.display()));
        let (a, b) = (cpath(&from), cpath(&to));
        let r = check(unsafe {
            libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), flags) as i32
        });
        let (noreplace, exchange) = (flags == libc::RENAME_NOREPLACE, flags == libc::RENAME_EXCHANGE);
        if self.outcome("rename", code(&r), self.m.rename((sd, &sn), (dd, &dn), noreplace, exchange)) {
            self.m.renamed((sd, &sn), (dd, &dn), exchange);
        }
    }

    fn check_name(&mut self) {
        let (d, n) = self.pick();
        let p = self.at(d, &n);
        let r = fs::symlink_metadata(&p);
        let Some(i) = self.m.entry(d, &n) else {
            self.outcome(&format!("lstat of the missing {}", p.display()), code(&r), Err(vec![libc::ENOENT]));
            return;
        };
        let md = r.unwrap_or_else(|e| self.fail(format!("lstat {}: {e}", p.display())));
        let kind = &self.m.nodes[&i].kind;
        let kind_ok = match kind {
            Kind::File => md.file_type().is_file(),
            Kind::Dir => md.file_type().is_dir(),
            Kind::Symlink(t) => {
                md.file_type().is_symlink()
                    && fs::read_link(&p).ok().map(|l| l.into_os_string().into_encoded_bytes()).as_ref() == Some(t)
            }
        };
        if md.ino() != i || !kind_ok {
            self.fail(format!(
                "lstat {}: inode {} mode {:o}, the model {i} {kind:?}",
                p.display(),
                md.ino(),
                md.mode()
            ));
        }
        if md.nlink() != u64::from(self.m.links(i)) {
            self.fail(format!("lstat {}: {} links, the model {}", p.display(), md.nlink(), self.m.links(i)));
        }
    }

    fn check_dir(&self, d: Ino) {
        let p = self.path(d);
        let mut got = BTreeMap::new();
        for e in fs::read_dir(&p).unwrap_or_else(|e| self.fail(format!("read_dir {}: {e}", p.display()))) {
            let e = e.unwrap();
            let name = e.file_name().into_encoded_bytes();
            if got.insert(name.clone(), e.ino()).is_some() {
                self.fail(format!("{} lists {} twice", p.display(), String::from_utf8_lossy(&name)));
            }
        }
        if got != self.m.nodes[&d].entries {
            self.fail(format!("{} lists {got:?}, the model has {:?}", p.display(), self.m.nodes[&d].entries));
        }
    }

    fn any_dir(&mut self) -> Ino {
        let d = self.m.dirs();
        d[self.rng.index(d.len())]
    }

    /// A listing read a few entries a call while the directory changes:
    /// every name there throughout and untouched is listed once, and no
    /// name twice unless it was touched.
    fn paged_listing(&mut self) {
        let d = self.any_dir();
        let p = self.path(d);
        self.note(format!("paged listing of {}", p.display()));
        let before: BTreeSet<Vec<u8>> = self.m.nodes[&d].entries.keys().cloned().collect();
        let dir = File::open(&p).unwrap_or_else(|e| self.fail(format!("open {}: {e}", p.display())));
        let mut seen: Vec<Vec<u8>> = Vec::new();
        let mut touched = BTreeSet::new();
        loop {
            // Room for two or three entries a call.
            let mut buf = vec![0u8; 24 + 56 * (1 + self.rng.index(2))];
            let n = unsafe { libc::syscall(libc::SYS_getdents64, dir.as_raw_fd(), buf.as_mut_ptr(), buf.len()) };
            if n < 0 {
                self.fail(format!("getdents64 {}: {}", p.display(), std::io::Error::last_os_error()));
            }
            if n == 0 {
                break;
            }
            let mut at = 0usize;
            while at < n as usize {
                let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
                let name = &buf[at + 19..at + reclen];
                seen.push(name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())].to_vec());
                at += reclen;
            }
            for _ in 0..self.rng.index(3) {
                let was = self.m.nodes.get(&d).map(|n| n.entries.clone()).unwrap_or_default();
                self.mutate();
                let now = self.m.nodes.get(&d).map(|n| n.entries.clone()).unwrap_or_default();
                for k in was.keys().chain(now.keys()) {
                    if was.get(k) != now.get(k) {
                        touched.insert(k.clone());
                    }
                }
            }
            if !self.m.nodes.contains_key(&d) {
                return;
            }
        }
        let after: BTreeSet<Vec<u8>> = self.m.nodes[&d].entries.keys().cloned().collect();
        let mut count: BTreeMap<&Vec<u8>, usize> = BTreeMap::new();
        for n in &seen {
            *count.entry(n).or_default() += 1;
        }
        let show = |n: &[u8]| String::from_utf8_lossy(n).into_owned();
        for n in before.intersection(&after).filter(|n| !touched.contains(*n)) {
            if count.get(n).copied() != Some(1) {
                self.fail(format!("a paged listing of {} gave {} {:?} times", p.display(), show(n), count.get(n)));
            }
        }
        for (n, c) in count {
            if c > 1 && !touched.contains(n) {
                self.fail(format!("a paged listing of {} gave {} {c} times", p.display(), show(n)));
            }
        }
    }

    fn check_all(&mut self, what: &str) {
        self.note(format!("check every directory ({what})"));
        for d in self.m.dirs() {
            self.check_dir(d);
        }
    }

    fn remount(&mut self) {
        self.note("unmount and mount".into());
        self.mounted.take().unwrap().unmount();
        self.mounted = Some(self.pool.mount(&self.opts));
        self.check_all("after a remount");
    }

    fn kill(&mut self) {
        self.note("fsync every directory, kill the server".into());
        for d in self.m.dirs() {
            let f = File::open(self.path(d)).unwrap();
            f.sync_all().unwrap_or_else(|e| self.fail(format!("fsync of a directory: {e}")));
        }
        self.mounted.take().unwrap().kill9();
        self.mounted = Some(self.pool.mount(&self.opts));
        self.check_all("after the server was killed");
    }

    fn mutate(&mut self) {
        match Change::draw(&mut self.rng) {
            Change::Create(kind) => self.create(kind),
            Change::Remove { dir } => self.remove(dir),
            Change::Link => self.link(),
            Change::Rename => self.rename(),
        }
    }

    fn step(&mut self) {
        match self.rng.below(200) {
            0..=139 => self.mutate(),
            140..=169 => self.check_name(),
            170..=183 => {
                let d = self.any_dir();
                self.check_dir(d);
            }
            184..=196 => self.paged_listing(),
            197..=198 => self.remount(),
            _ => self.kill(),
        }
    }
}

fn run(opts: &[&'static str], seed0: u64) {
    let steps: usize = std::env::var("NSM_OPS").ok().and_then(|v| v.parse().ok()).unwrap_or(2500);
    let seed = std::env::var("NSM_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1) + seed0;
    let pool = Pool::new(2, "256M");
    let m = pool.mount(opts);
    let root = fs::metadata(&pool.mnt).unwrap().ino();
    let mut r = Run {
        rng: Rng(seed),
        pool,
        mounted: Some(m),
        m: Model::new(root),
        log: OpLog::new(format!("namespace through the mount {opts:?}"), seed),
        opts: opts.to_vec(),
    };
    for s in 0..steps {
        r.log.step = s;
        r.step();
    }
    r.check_all("at the end");
    eprintln!("{opts:?}: {steps} steps, {} names and directories at the end", r.m.nodes.len());
    r.mounted.take().unwrap().unmount();
    r.pool.fsck_clean();
}

#[test]
fn random_namespace_operations_through_the_mount_match_the_model() {
    require_fuse!();
    run(&[], 0);
}

/// Shared mounts keep names the kernel may cache by who may search the
/// directory: the same checks there.
#[test]
fn random_namespace_operations_through_an_allow_other_mount_match_the_model() {
    require_fuse!();
    run(&["allow_other"], 1000);
}
