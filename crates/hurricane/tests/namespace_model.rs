//! Random namespace operations against a model, with caches small enough
//! that inodes, names and store pages are evicted and read back all the
//! time, and checkpoints of a few dozen changes.
//!
//! Creates, directories, symbolic links, hard links, unlinks, rmdirs and
//! renames (plain, `RENAME_NOREPLACE`, `RENAME_EXCHANGE`) go to a few
//! directories with a few names each, so that names collide, directories
//! fill and empty, and renames meet every case POSIX names. Each result is
//! checked against the model: the error where one is due (from the set of
//! errors that apply), else the change. Lookups, link counts and whole
//! listings are compared as it goes; a listing read a page at a time while
//! the directory changes must list every name that stayed, once; and the
//! pool is checkpointed, closed and opened again, and cut off after a sync
//! (power cut), after which everything synced must be there as it was.
//! `NS_OPS` sets the steps per seed (default 4,000), `NS_SEED` the first
//! seed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::ns_model::{Change, Ino, Kind, Model};
use common::oplog::OpLog;
use common::rng::Rng;
use common::*;
use hurricane::device::CrashMode;
use hurricane::{Creds, Fs, Options, RenameFlags};
use std::collections::{BTreeMap, BTreeSet};

const NAMES: &[&str] = &["a", "b", "c", "dd", "e", "f0", "f1", "long-name-with-some-length", "x.y", "z"];

fn errno<T>(r: &hurricane::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.errno(),
    }
}

fn opts() -> Options {
    // The store's page cache at its floor (1 MiB): a checkpoint every few
    // dozen changed inodes, and pages read back all the time.
    Options { inode_cache: 16, entry_cache: 16, meta_cache_bytes: 1 << 20, ..quiet() }
}

struct Run {
    rng: Rng,
    pool: MemPool,
    fs: Fs,
    m: Model,
    log: OpLog,
    cred: Creds,
    names: Vec<Vec<u8>>,
    max_dirs: usize,
}

impl Run {
    fn fail(&self, why: String) -> ! {
        self.log.fail(why)
    }

    fn note(&mut self, s: String) {
        self.log.note(s);
    }

    fn pick_dir(&mut self) -> Ino {
        let d = self.m.dirs();
        d[self.rng.index(d.len())]
    }

    fn pick_name(&mut self) -> Vec<u8> {
        self.names[self.rng.index(self.names.len())].clone()
    }

    /// A result that must be one of `want` (0: success).
    fn expect_errno<T>(&self, what: &str, r: &hurricane::Result<T>, want: &[i32]) {
        let got = errno(r);
        if !want.contains(&got) {
            let e = r.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
            self.fail(format!("{what}: errno {got} ({e}), expected one of {want:?}"));
        }
    }

    /// Checks a result against what the model says must happen; true
    /// when the operation succeeded and changed the namespace.
    fn outcome<T>(&self, what: &str, r: &hurricane::Result<T>, want: Result<(), Vec<i32>>) -> bool {
        match want {
            Ok(()) => {
                self.expect_errno(what, r, &[0]);
                true
            }
            Err(errors) => {
                self.expect_errno(what, r, &errors);
                false
            }
        }
    }

    fn create(&mut self, kind: usize) {
        let (d, n) = (self.pick_dir(), self.pick_name());
        if kind == 1 && self.m.dirs().len() >= self.max_dirs {
            return;
        }
        let name = String::from_utf8_lossy(&n).into_owned();
        let target = format!("target-{}", self.rng.below(1000)).into_bytes();
        self.note(format!("{} {d}/{name}", ["create", "mkdir", "symlink"][kind]));
        let (r, k) = match kind {
            0 => (self.fs.mknod(&self.cred, d, &n, libc::S_IFREG | 0o644, 0, None, None), Kind::File),
            1 => (self.fs.mkdir(&self.cred, d, &n, 0o755), Kind::Dir),
            _ => (self.fs.symlink(&self.cred, d, &n, &target), Kind::Symlink(target)),
        };
        if self.outcome("create", &r, self.m.create(d, &n)) {
            let ino = r.unwrap().ino;
            if self.m.nodes.contains_key(&ino) {
                self.fail(format!("a new file got inode {ino}, which is live"));
            }
            self.m.created(d, &n, ino, k);
        }
    }

    fn unlink(&mut self, dir: bool) {
        let (d, n) = (self.pick_dir(), self.pick_name());
        self.note(format!("{} {d}/{}", if dir { "rmdir" } else { "unlink" }, String::from_utf8_lossy(&n)));
        let r = if dir { self.fs.rmdir(&self.cred, d, &n) } else { self.fs.unlink(&self.cred, d, &n) };
        if self.outcome("remove", &r, self.m.remove(d, &n, dir)) {
            self.m.removed(d, &n);
        }
    }

    fn link(&mut self) {
        // An existing name, linked anew.
        let (sd, sn) = (self.pick_dir(), self.pick_name());
        let Some(i) = self.m.entry(sd, &sn) else { return };
        let (d, n) = (self.pick_dir(), self.pick_name());
        self.note(format!("link {i} as {d}/{}", String::from_utf8_lossy(&n)));
        let r = self.fs.link(&self.cred, i, d, &n);
        if self.outcome("link", &r, self.m.link(i, d, &n)) {
            self.m.linked(i, d, &n);
        }
    }

    fn rename(&mut self) {
        let (sd, sn, dd, dn) = (self.pick_dir(), self.pick_name(), self.pick_dir(), self.pick_name());
        let flags = match self.rng.below(4) {
            0 => RenameFlags { noreplace: true, exchange: false, ..Default::default() },
            1 => RenameFlags { noreplace: false, exchange: true, ..Default::default() },
            _ => RenameFlags::default(),
        };
        self.note(format!(
            "rename {sd}/{} -> {dd}/{} {flags:?}",
            String::from_utf8_lossy(&sn),
            String::from_utf8_lossy(&dn)
        ));
        let r = self.fs.rename(&self.cred, sd, &sn, dd, &dn, flags);
        let want = self.m.rename((sd, &sn), (dd, &dn), flags.noreplace, flags.exchange);
        if self.outcome("rename", &r, want) {
            self.m.renamed((sd, &sn), (dd, &dn), flags.exchange);
        }
    }

    /// One directory's whole listing, as the engine gives it.
    fn listing(&self, d: Ino) -> Vec<(Vec<u8>, Ino, u64)> {
        let mut v = Vec::new();
        let r = self.fs.readdir(&self.cred, d, 0, |it| {
            v.push((it.name, it.ino, it.next));
            true
        });
        if let Err(e) = r {
            self.fail(format!("readdir of {d}: {e}"));
        }
        v
    }

    fn check_dir(&self, d: Ino) {
        let node = &self.m.nodes[&d];
        let list = self.listing(d);
        let mut got = BTreeMap::new();
        for (name, ino, _) in &list {
            if got.insert(name.clone(), *ino).is_some() {
                self.fail(format!("directory {d} lists {} twice", String::from_utf8_lossy(name)));
            }
        }
        let want_dots = [(b".".to_vec(), d), (b"..".to_vec(), node.parent)];
        for (n, i) in &want_dots {
            if got.remove(n) != Some(*i) {
                self.fail(format!("directory {d}: {} is not {i}", String::from_utf8_lossy(n)));
            }
        }
        if got != node.entries {
            self.fail(format!("directory {d} lists {got:?}, the model has {:?}", node.entries));
        }
        let a = self.fs.getattr(d).unwrap_or_else(|e| self.fail(format!("getattr of directory {d}: {e}")));
        if a.nlink != self.m.links(d) {
            self.fail(format!("directory {d} has {} links, the model {}", a.nlink, self.m.links(d)));
        }
    }

    fn check_lookup(&mut self) {
        let (d, n) = (self.pick_dir(), self.pick_name());
        let r = self.fs.lookup(&self.cred, d, &n);
        match self.m.entry(d, &n) {
            None => self.expect_errno("lookup of a missing name", &r, &[libc::ENOENT]),
            Some(i) => {
                let a = r.unwrap_or_else(|e| self.fail(format!("lookup of {d}/{}: {e}", String::from_utf8_lossy(&n))));
                let node = &self.m.nodes[&i];
                let kind_ok = match &node.kind {
                    Kind::File => a.mode & libc::S_IFMT == libc::S_IFREG,
                    Kind::Dir => a.mode & libc::S_IFMT == libc::S_IFDIR,
                    Kind::Symlink(t) => {
                        a.mode & libc::S_IFMT == libc::S_IFLNK && self.fs.readlink(i).ok().as_ref() == Some(t)
                    }
                };
                if a.ino != i || !kind_ok {
                    self.fail(format!(
                        "lookup of {d}/{} gave inode {} mode {:o}, the model {i} {:?}",
                        String::from_utf8_lossy(&n),
                        a.ino,
                        a.mode,
                        node.kind
                    ));
                }
                if a.nlink != self.m.links(i) {
                    self.fail(format!("inode {i} has {} links, the model {}", a.nlink, self.m.links(i)));
                }
            }
        }
    }

    /// A listing read a few entries at a time while the directory changes:
    /// every name there from start to end and not touched is listed once,
    /// and no name twice unless it was touched.
    fn paged_listing(&mut self) {
        let d = self.pick_dir();
        let before: BTreeSet<Vec<u8>> = self.m.nodes[&d].entries.keys().cloned().collect();
        let mut seen: Vec<Vec<u8>> = Vec::new();
        let mut touched: BTreeSet<Vec<u8>> = BTreeSet::new();
        let mut cookie = 0;
        self.note(format!("paged listing of {d}"));
        loop {
            let page = 1 + self.rng.index(3);
            let mut got = 0;
            let mut end = true;
            let r = self.fs.readdir(&self.cred, d, cookie, |it| {
                seen.push(it.name);
                cookie = it.next;
                got += 1;
                end = false;
                got < page
            });
            if let Err(e) = r {
                if !self.m.nodes.contains_key(&d) {
                    // The directory was removed meanwhile.
                    return;
                }
                self.fail(format!("readdir of {d} from {cookie}: {e}"));
            }
            if end {
                break;
            }
            // Changes in between, some in this directory.
            for _ in 0..self.rng.index(3) {
                let names_before: BTreeMap<Vec<u8>, Ino> =
                    self.m.nodes.get(&d).map(|n| n.entries.clone()).unwrap_or_default();
                self.mutate();
                let after: BTreeMap<Vec<u8>, Ino> = self.m.nodes.get(&d).map(|n| n.entries.clone()).unwrap_or_default();
                for k in names_before.keys().chain(after.keys()) {
                    if names_before.get(k) != after.get(k) {
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
        for n in before.intersection(&after).filter(|n| !touched.contains(*n)) {
            if count.get(n).copied() != Some(1) {
                self.fail(format!(
                    "a paged listing of {d} gave {} {:?} times",
                    String::from_utf8_lossy(n),
                    count.get(n)
                ));
            }
        }
        for (n, c) in count {
            if c > 1 && !touched.contains(n) && n != b"." && n != b".." {
                self.fail(format!("a paged listing of {d} gave {} {c} times", String::from_utf8_lossy(n)));
            }
        }
    }

    fn check_all(&self, what: &str) {
        for d in self.m.dirs() {
            self.check_dir(d);
        }
        check_clean(&self.fs, what);
    }

    fn reopen(&mut self) {
        self.note("close and open".into());
        self.fs.close().unwrap_or_else(|e| self.fail(format!("close: {e}")));
        self.fs = self.pool.open_with(opts()).unwrap_or_else(|e| self.fail(format!("open: {e}")));
        self.check_all("after a reopen");
    }

    fn power_cut(&mut self) {
        self.note("sync, then a power cut".into());
        self.fs.sync().unwrap_or_else(|e| self.fail(format!("sync: {e}")));
        let cut = self.pool.crash(CrashMode::Random(self.rng.next()));
        // The pool went down with the machine: what it still writes goes
        // to the devices left behind.
        let fs = cut.open_with(opts()).unwrap_or_else(|e| self.fail(format!("open after a power cut: {e}")));
        drop(std::mem::replace(&mut self.fs, fs));
        self.pool = cut;
        self.check_all("after a power cut");
    }

    fn mutate(&mut self) {
        match Change::draw(&mut self.rng) {
            Change::Create(kind) => self.create(kind),
            Change::Remove { dir } => self.unlink(dir),
            Change::Link => self.link(),
            Change::Rename => self.rename(),
        }
    }

    fn step(&mut self) {
        match self.rng.below(100) {
            0..=69 => self.mutate(),
            70..=79 => self.check_lookup(),
            80..=86 => {
                let d = self.pick_dir();
                self.check_dir(d);
            }
            87..=92 => self.paged_listing(),
            93..=97 => {
                self.note("checkpoint".into());
                self.fs.checkpoint().unwrap_or_else(|e| self.fail(format!("checkpoint: {e}")));
            }
            98 => self.reopen(),
            _ => self.power_cut(),
        }
    }
}

/// `seeds` runs of `steps` each, names drawn from `names`, at most
/// `max_dirs` directories.
fn runs(first: u64, seeds: u64, steps: usize, names: Vec<Vec<u8>>, max_dirs: usize) {
    for seed in first..first + seeds {
        let pool = MemPool::new(1, 64 * MB);
        let fs = pool.open_with(opts()).unwrap();
        let root = fs.resolve("/").unwrap();
        let mut r = Run {
            rng: Rng(seed),
            pool,
            fs,
            m: Model::new(root),
            log: OpLog::new("namespace", seed),
            cred: Creds::root(),
            names: names.clone(),
            max_dirs,
        };
        for s in 0..steps {
            r.log.step = s;
            r.step();
        }
        r.check_all("at the end");
        let st = r.fs.meta_cache_stats();
        eprintln!(
            "seed {seed}: {steps} steps, {} files and directories at the end ({} directories); since the last open: {} checkpoints, inodes read back {}, evicted {}, names read from the store {}",
            r.m.nodes.len(),
            r.m.dirs().len(),
            r.fs.commit_counts().1,
            st.inodes.misses,
            st.inodes.evictions,
            st.store.name_reads
        );
        r.reopen();
        r.fs.close().unwrap();
    }
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// A few names in many directories: names collide, directories fill and
/// empty, renames move trees about.
#[test]
fn random_namespace_operations_match_the_model() {
    let names = NAMES.iter().map(|n| n.as_bytes().to_vec()).collect();
    runs(env("NS_SEED").unwrap_or(1), 4, env("NS_OPS").unwrap_or(4000) as usize, names, 24);
}

/// Many names in a few directories: each directory spans many leaves of
/// the store's trees, which split and merge as names come and go.
#[test]
fn random_namespace_operations_in_large_directories_match_the_model() {
    let names = (0..600).map(|i| format!("entry-{i:04}-{}", "x".repeat(i % 40)).into_bytes()).collect();
    runs(env("NS_SEED").unwrap_or(1) + 100, 1, env("NS_OPS").unwrap_or(4000) as usize * 3 / 2, names, 4);
}
