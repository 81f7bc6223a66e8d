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

use fuse_util::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::{self, File};
use std::os::unix::fs::{DirEntryExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::PathBuf;

type Ino = u64;

const NAMES: &[&str] = &["a", "b", "c", "dd", "e", "f0", "long-name-with-some-length", "x.y"];
const MAX_DIRS: usize = 16;

#[derive(Clone, Debug, PartialEq)]
enum Kind {
    File,
    Dir,
    Symlink(Vec<u8>),
}

struct Node {
    kind: Kind,
    entries: BTreeMap<String, Ino>,
    parent: Ino,
    nlink: u32,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn code<T>(r: &std::io::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.raw_os_error().unwrap_or(-1),
    }
}

struct Run {
    rng: Rng,
    pool: Pool,
    m: Option<Mounted>,
    nodes: HashMap<Ino, Node>,
    root: Ino,
    seed: u64,
    step: usize,
    log: Vec<String>,
    opts: Vec<&'static str>,
}

impl Run {
    fn fail(&self, why: String) -> ! {
        let tail = &self.log[self.log.len().saturating_sub(30)..];
        panic!("seed {}, step {}: {why}\nlast operations:\n  {}", self.seed, self.step, tail.join("\n  "));
    }

    fn note(&mut self, s: String) {
        self.log.push(s);
        if self.log.len() > 400 {
            self.log.drain(..200);
        }
    }

    fn is_dir(&self, i: Ino) -> bool {
        self.nodes[&i].kind == Kind::Dir
    }

    fn dirs(&self) -> Vec<Ino> {
        let mut v: Vec<Ino> = self.nodes.iter().filter(|(_, n)| n.kind == Kind::Dir).map(|(i, _)| *i).collect();
        v.sort_unstable();
        v
    }

    /// A directory's path through the mount.
    fn path(&self, d: Ino) -> PathBuf {
        if d == self.root {
            return self.pool.mnt.clone();
        }
        let p = self.nodes[&d].parent;
        let name = self.nodes[&p].entries.iter().find(|(_, i)| **i == d).map(|(n, _)| n.clone()).unwrap();
        self.path(p).join(name)
    }

    fn within(&self, mut d: Ino, top: Ino) -> bool {
        loop {
            if d == top {
                return true;
            }
            if d == self.root {
                return false;
            }
            d = self.nodes[&d].parent;
        }
    }

    fn pick(&mut self) -> (Ino, String) {
        let d = self.dirs();
        let d = d[self.rng.below(d.len())];
        (d, NAMES[self.rng.below(NAMES.len())].to_string())
    }

    fn expect(&self, what: &str, got: i32, want: &[i32]) {
        if !want.contains(&got) {
            self.fail(format!("{what}: errno {got}, expected one of {want:?}"));
        }
    }

    fn unlinked(&mut self, i: Ino) {
        if self.is_dir(i) {
            self.nodes.remove(&i);
            return;
        }
        let n = self.nodes.get_mut(&i).unwrap();
        n.nlink -= 1;
        if n.nlink == 0 {
            self.nodes.remove(&i);
        }
    }

    fn create(&mut self, kind: usize) {
        let (d, n) = self.pick();
        if kind == 1 && self.dirs().len() >= MAX_DIRS {
            return;
        }
        let p = self.path(d).join(&n);
        let target = format!("target-{}", self.rng.below(1000));
        self.note(format!("{} {}", ["create", "mkdir", "symlink"][kind.min(2)], p.display()));
        let r = match kind {
            0 => fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(&p).map(drop),
            1 => fs::create_dir(&p),
            _ => std::os::unix::fs::symlink(&target, &p),
        };
        if self.nodes[&d].entries.contains_key(&n) {
            return self.expect("create over a name", code(&r), &[libc::EEXIST]);
        }
        self.expect("create", code(&r), &[0]);
        let ino = fs::symlink_metadata(&p).unwrap_or_else(|e| self.fail(format!("lstat after create: {e}"))).ino();
        if self.nodes.contains_key(&ino) {
            self.fail(format!("a new name got inode {ino}, which is live"));
        }
        let k = match kind {
            0 => Kind::File,
            1 => Kind::Dir,
            _ => Kind::Symlink(target.into_bytes()),
        };
        self.nodes.get_mut(&d).unwrap().entries.insert(n, ino);
        self.nodes.insert(ino, Node { kind: k, entries: BTreeMap::new(), parent: d, nlink: 1 });
    }

    fn remove(&mut self, dir: bool) {
        let (d, n) = self.pick();
        let p = self.path(d).join(&n);
        self.note(format!("{} {}", if dir { "rmdir" } else { "unlink" }, p.display()));
        let r = if dir { fs::remove_dir(&p) } else { fs::remove_file(&p) };
        let Some(i) = self.nodes[&d].entries.get(&n).copied() else {
            return self.expect("removing a missing name", code(&r), &[libc::ENOENT]);
        };
        match (dir, self.is_dir(i)) {
            (false, true) => return self.expect("unlink of a directory", code(&r), &[libc::EISDIR, libc::EPERM]),
            (true, false) => return self.expect("rmdir of a non-directory", code(&r), &[libc::ENOTDIR]),
            (true, true) if !self.nodes[&i].entries.is_empty() => {
                return self.expect("rmdir of a full directory", code(&r), &[libc::ENOTEMPTY, libc::EEXIST]);
            }
            _ => {}
        }
        self.expect("remove", code(&r), &[0]);
        self.nodes.get_mut(&d).unwrap().entries.remove(&n);
        self.unlinked(i);
    }

    fn link(&mut self) {
        let (sd, sn) = self.pick();
        let Some(i) = self.nodes[&sd].entries.get(&sn).copied() else { return };
        let (d, n) = self.pick();
        let (from, to) = (self.path(sd).join(&sn), self.path(d).join(&n));
        self.note(format!("link {} {}", from.display(), to.display()));
        let r = fs::hard_link(&from, &to);
        // Linux looks for the new name before it looks at what is linked.
        match (self.is_dir(i), self.nodes[&d].entries.contains_key(&n)) {
            (true, true) => {
                return self.expect("link of a directory over a name", code(&r), &[libc::EEXIST, libc::EPERM])
            }
            (true, false) => return self.expect("link of a directory", code(&r), &[libc::EPERM]),
            (false, true) => return self.expect("link over a name", code(&r), &[libc::EEXIST]),
            (false, false) => {}
        }
        self.expect("link", code(&r), &[0]);
        self.nodes.get_mut(&d).unwrap().entries.insert(n, i);
        self.nodes.get_mut(&i).unwrap().nlink += 1;
    }

    fn rename(&mut self) {
        let ((sd, sn), (dd, dn)) = (self.pick(), self.pick());
        let flags: u32 = match self.rng.below(4) {
            0 => libc::RENAME_NOREPLACE,
            1 => libc::RENAME_EXCHANGE,
            _ => 0,
        };
        let (from, to) = (self.path(sd).join(&sn), self.path(dd).join(&dn));
        self.note(format!("rename {} {} flags {flags}", from.display(), to.display()));
        let (a, b) = (cpath(&from), cpath(&to));
        let r = check(unsafe {
            libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), flags) as i32
        });
        let got = code(&r);
        let Some(s) = self.nodes[&sd].entries.get(&sn).copied() else {
            return self.expect("rename of a missing name", got, &[libc::ENOENT]);
        };
        let t = self.nodes[&dd].entries.get(&dn).copied();
        if flags == libc::RENAME_EXCHANGE {
            let Some(t) = t else { return self.expect("exchange with a missing name", got, &[libc::ENOENT]) };
            if (sd, &sn) == (dd, &dn) || s == t {
                return self.expect("exchange with itself", got, &[0, libc::EINVAL]);
            }
            if self.is_dir(s) && self.within(dd, s) || self.is_dir(t) && self.within(sd, t) {
                return self.expect("exchange into itself", got, &[libc::EINVAL]);
            }
            self.expect("exchange", got, &[0]);
            self.nodes.get_mut(&sd).unwrap().entries.insert(sn, t);
            self.nodes.get_mut(&dd).unwrap().entries.insert(dn, s);
            if self.is_dir(s) {
                self.nodes.get_mut(&s).unwrap().parent = dd;
            }
            if self.is_dir(t) {
                self.nodes.get_mut(&t).unwrap().parent = sd;
            }
            return;
        }
        let mut bad = Vec::new();
        if flags == libc::RENAME_NOREPLACE && t.is_some() {
            bad.push(libc::EEXIST);
        }
        if self.is_dir(s) && self.within(dd, s) && (sd, &sn) != (dd, &dn) {
            bad.push(libc::EINVAL);
        }
        if let Some(t) = t {
            if t != s {
                match (self.is_dir(s), self.is_dir(t)) {
                    (true, false) => bad.push(libc::ENOTDIR),
                    (false, true) => bad.extend([libc::EISDIR, libc::ENOTEMPTY]),
                    (true, true) if !self.nodes[&t].entries.is_empty() => bad.extend([libc::ENOTEMPTY, libc::EEXIST]),
                    _ => {}
                }
            }
        }
        if !bad.is_empty() {
            return self.expect("a rename POSIX refuses", got, &bad);
        }
        self.expect("rename", got, &[0]);
        if t == Some(s) {
            return;
        }
        self.nodes.get_mut(&sd).unwrap().entries.remove(&sn);
        if let Some(old) = self.nodes.get_mut(&dd).unwrap().entries.insert(dn, s) {
            self.unlinked(old);
        }
        if self.is_dir(s) {
            self.nodes.get_mut(&s).unwrap().parent = dd;
        }
    }

    fn check_name(&mut self) {
        let (d, n) = self.pick();
        let p = self.path(d).join(&n);
        let r = fs::symlink_metadata(&p);
        let Some(i) = self.nodes[&d].entries.get(&n).copied() else {
            return self.expect(&format!("lstat of the missing {}", p.display()), code(&r), &[libc::ENOENT]);
        };
        let md = r.unwrap_or_else(|e| self.fail(format!("lstat {}: {e}", p.display())));
        let node = &self.nodes[&i];
        let kind_ok = match &node.kind {
            Kind::File => md.file_type().is_file(),
            Kind::Dir => md.file_type().is_dir(),
            Kind::Symlink(t) => {
                md.file_type().is_symlink()
                    && fs::read_link(&p).ok().map(|l| l.into_os_string().into_encoded_bytes()) == Some(t.clone())
            }
        };
        if md.ino() != i || !kind_ok {
            self.fail(format!(
                "lstat {}: inode {} mode {:o}, the model {i} {:?}",
                p.display(),
                md.ino(),
                md.mode(),
                node.kind
            ));
        }
        let links = match node.kind {
            Kind::Dir => 2 + node.entries.values().filter(|c| self.is_dir(**c)).count() as u64,
            _ => u64::from(node.nlink),
        };
        if md.nlink() != links {
            self.fail(format!("lstat {}: {} links, the model {links}", p.display(), md.nlink()));
        }
    }

    fn check_dir(&self, d: Ino) {
        let p = self.path(d);
        let mut got = BTreeMap::new();
        for e in fs::read_dir(&p).unwrap_or_else(|e| self.fail(format!("read_dir {}: {e}", p.display()))) {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if got.insert(name.clone(), e.ino()).is_some() {
                self.fail(format!("{} lists {name} twice", p.display()));
            }
        }
        if got != self.nodes[&d].entries {
            self.fail(format!("{} lists {got:?}, the model has {:?}", p.display(), self.nodes[&d].entries));
        }
    }

    /// A listing read a few entries a call while the directory changes.
    fn paged_listing(&mut self) {
        let d = self.dirs()[self.rng.below(self.dirs().len())];
        let p = self.path(d);
        self.note(format!("paged listing of {}", p.display()));
        let before: BTreeSet<String> = self.nodes[&d].entries.keys().cloned().collect();
        let dir = File::open(&p).unwrap_or_else(|e| self.fail(format!("open {}: {e}", p.display())));
        let mut seen: Vec<String> = Vec::new();
        let mut touched = BTreeSet::new();
        loop {
            // Room for two or three entries a call.
            let mut buf = vec![0u8; 24 + 56 * (1 + self.rng.below(2))];
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
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                seen.push(String::from_utf8_lossy(name).into_owned());
                at += reclen;
            }
            for _ in 0..self.rng.below(3) {
                let was: BTreeMap<String, Ino> = self.nodes.get(&d).map(|n| n.entries.clone()).unwrap_or_default();
                self.mutate();
                let now: BTreeMap<String, Ino> = self.nodes.get(&d).map(|n| n.entries.clone()).unwrap_or_default();
                for k in was.keys().chain(now.keys()) {
                    if was.get(k) != now.get(k) {
                        touched.insert(k.clone());
                    }
                }
            }
            if !self.nodes.contains_key(&d) {
                return;
            }
        }
        let after: BTreeSet<String> = self.nodes[&d].entries.keys().cloned().collect();
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &seen {
            *count.entry(n).or_default() += 1;
        }
        for n in before.intersection(&after).filter(|n| !touched.contains(*n)) {
            if count.get(n.as_str()).copied() != Some(1) {
                self.fail(format!("a paged listing of {} gave {n} {:?} times", p.display(), count.get(n.as_str())));
            }
        }
        for (n, c) in count {
            if c > 1 && !touched.contains(n) {
                self.fail(format!("a paged listing of {} gave {n} {c} times", p.display()));
            }
        }
    }

    fn check_all(&mut self, what: &str) {
        self.note(format!("check every directory ({what})"));
        for d in self.dirs() {
            self.check_dir(d);
        }
    }

    fn remount(&mut self) {
        self.note("unmount and mount".into());
        self.m.take().unwrap().unmount();
        self.m = Some(self.pool.mount(&self.opts));
        self.check_all("after a remount");
    }

    fn kill(&mut self) {
        self.note("fsync every directory, kill the server".into());
        for d in self.dirs() {
            let f = File::open(self.path(d)).unwrap();
            f.sync_all().unwrap_or_else(|e| self.fail(format!("fsync of a directory: {e}")));
        }
        self.m.take().unwrap().kill9();
        self.m = Some(self.pool.mount(&self.opts));
        self.check_all("after the server was killed");
    }

    fn mutate(&mut self) {
        match self.rng.below(20) {
            0..=4 => self.create(0),
            5..=6 => self.create(1),
            7 => self.create(2),
            8..=10 => self.remove(false),
            11..=12 => self.remove(true),
            13..=14 => self.link(),
            _ => self.rename(),
        }
    }

    fn step(&mut self) {
        match self.rng.below(200) {
            0..=139 => self.mutate(),
            140..=169 => self.check_name(),
            170..=183 => {
                let d = self.dirs()[self.rng.below(self.dirs().len())];
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
    let mut nodes = HashMap::new();
    nodes.insert(root, Node { kind: Kind::Dir, entries: BTreeMap::new(), parent: root, nlink: 1 });
    let mut r =
        Run { rng: Rng(seed), pool, m: Some(m), nodes, root, seed, step: 0, log: Vec::new(), opts: opts.to_vec() };
    for s in 0..steps {
        r.step = s;
        r.step();
    }
    r.check_all("at the end");
    eprintln!("{opts:?}: {steps} steps, {} names and directories at the end", r.nodes.len());
    r.m.take().unwrap().unmount();
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
