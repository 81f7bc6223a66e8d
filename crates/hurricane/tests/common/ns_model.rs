//! The model the random namespace tests check a file system against: each
//! directory's names, each file's link count, and for every operation what
//! POSIX (as Linux answers it) says must happen. Shared by the engine's test
//! (`namespace_model.rs`) and the mount's (`fuse_namespace_model.rs`, through
//! `fuse_util`).
//!
//! An operation's check returns `Ok(())` when it must succeed and change
//! the namespace (then the matching `*ed` method applies the change), or
//! `Err(errors)`: it must fail with one of `errors` (where several rules
//! apply, the order Linux checks them in is not the model's business), and
//! nothing changes. An `errors` holding 0 allows success that changes
//! nothing (a rename onto itself).

use super::rng::Rng;
use std::collections::{BTreeMap, HashMap};

pub type Ino = u64;

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    File,
    Dir,
    Symlink(Vec<u8>),
}

#[derive(Clone, Debug)]
pub struct Node {
    pub kind: Kind,
    /// A directory's names.
    pub entries: BTreeMap<Vec<u8>, Ino>,
    /// A directory's parent.
    pub parent: Ino,
    /// The names of a file or symbolic link.
    pub nlink: u32,
}

/// A change to the namespace, drawn with the weights both tests use.
pub enum Change {
    /// A file (0), a directory (1) or a symbolic link (2).
    Create(usize),
    /// An unlink, or with `dir` an rmdir.
    Remove {
        dir: bool,
    },
    Link,
    Rename,
}

impl Change {
    pub fn draw(rng: &mut Rng) -> Change {
        match rng.below(20) {
            0..=4 => Change::Create(0),
            5..=6 => Change::Create(1),
            7 => Change::Create(2),
            8..=10 => Change::Remove { dir: false },
            11..=12 => Change::Remove { dir: true },
            13..=14 => Change::Link,
            _ => Change::Rename,
        }
    }
}

pub struct Model {
    pub nodes: HashMap<Ino, Node>,
    pub root: Ino,
}

impl Model {
    pub fn new(root: Ino) -> Model {
        let mut nodes = HashMap::new();
        nodes.insert(root, Node { kind: Kind::Dir, entries: BTreeMap::new(), parent: root, nlink: 1 });
        Model { nodes, root }
    }

    /// Every directory, in inode order.
    pub fn dirs(&self) -> Vec<Ino> {
        let mut v: Vec<Ino> = self.nodes.iter().filter(|(_, n)| n.kind == Kind::Dir).map(|(i, _)| *i).collect();
        v.sort_unstable();
        v
    }

    pub fn entry(&self, d: Ino, name: &[u8]) -> Option<Ino> {
        self.nodes.get(&d).and_then(|n| n.entries.get(name).copied())
    }

    pub fn is_dir(&self, i: Ino) -> bool {
        self.nodes[&i].kind == Kind::Dir
    }

    /// Whether directory `d` is `top` or below it.
    pub fn within(&self, mut d: Ino, top: Ino) -> bool {
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

    /// The link count `stat` must show: a directory's two and one for each
    /// directory in it, a file's names.
    pub fn links(&self, i: Ino) -> u32 {
        let n = &self.nodes[&i];
        match n.kind {
            Kind::Dir => 2 + n.entries.values().filter(|c| self.is_dir(**c)).count() as u32,
            _ => n.nlink,
        }
    }

    /// A name of `i` is gone (the entry already removed).
    fn unlinked(&mut self, i: Ino) {
        if self.is_dir(i) {
            self.nodes.remove(&i);
            return;
        }
        let n = self.nodes.get_mut(&i).expect("a live inode");
        n.nlink -= 1;
        if n.nlink == 0 {
            self.nodes.remove(&i);
        }
    }

    /// A create, mkdir or symlink of `name` in `d`.
    pub fn create(&self, d: Ino, name: &[u8]) -> Result<(), Vec<i32>> {
        match self.entry(d, name) {
            Some(_) => Err(vec![libc::EEXIST]),
            None => Ok(()),
        }
    }

    pub fn created(&mut self, d: Ino, name: &[u8], ino: Ino, kind: Kind) {
        self.nodes.get_mut(&d).expect("a live directory").entries.insert(name.to_vec(), ino);
        self.nodes.insert(ino, Node { kind, entries: BTreeMap::new(), parent: d, nlink: 1 });
    }

    /// An unlink (`dir` false) or rmdir of `name` in `d`.
    pub fn remove(&self, d: Ino, name: &[u8], dir: bool) -> Result<(), Vec<i32>> {
        let Some(i) = self.entry(d, name) else { return Err(vec![libc::ENOENT]) };
        match (dir, self.is_dir(i)) {
            (false, true) => Err(vec![libc::EISDIR, libc::EPERM]),
            (true, false) => Err(vec![libc::ENOTDIR]),
            (true, true) if !self.nodes[&i].entries.is_empty() => Err(vec![libc::ENOTEMPTY, libc::EEXIST]),
            _ => Ok(()),
        }
    }

    pub fn removed(&mut self, d: Ino, name: &[u8]) {
        let i = self.nodes.get_mut(&d).expect("a live directory").entries.remove(name).expect("a live name");
        self.unlinked(i);
    }

    /// A hard link to `i` as `name` in `d`.
    pub fn link(&self, i: Ino, d: Ino, name: &[u8]) -> Result<(), Vec<i32>> {
        // The new name is looked for before what is linked.
        match (self.entry(d, name).is_some(), self.is_dir(i)) {
            (true, _) => Err(vec![libc::EEXIST]),
            (false, true) => Err(vec![libc::EPERM]),
            (false, false) => Ok(()),
        }
    }

    pub fn linked(&mut self, i: Ino, d: Ino, name: &[u8]) {
        self.nodes.get_mut(&d).expect("a live directory").entries.insert(name.to_vec(), i);
        self.nodes.get_mut(&i).expect("a live inode").nlink += 1;
    }

    /// A rename of `sn` in `sd` to `dn` in `dd` (renameat2's
    /// `RENAME_NOREPLACE` and `RENAME_EXCHANGE` as the flags say).
    pub fn rename(
        &self,
        (sd, sn): (Ino, &[u8]),
        (dd, dn): (Ino, &[u8]),
        noreplace: bool,
        exchange: bool,
    ) -> Result<(), Vec<i32>> {
        let Some(s) = self.entry(sd, sn) else { return Err(vec![libc::ENOENT]) };
        let t = self.entry(dd, dn);
        if exchange {
            let Some(t) = t else { return Err(vec![libc::ENOENT]) };
            if s == t {
                return Err(vec![0, libc::EINVAL]);
            }
            // Neither may end up below itself.
            if self.is_dir(s) && self.within(dd, s) || self.is_dir(t) && self.within(sd, t) {
                return Err(vec![libc::EINVAL]);
            }
            return Ok(());
        }
        let mut bad = Vec::new();
        if noreplace && t.is_some() {
            bad.push(libc::EEXIST);
        }
        if self.is_dir(s) && self.within(dd, s) && (sd, sn) != (dd, dn) {
            bad.push(libc::EINVAL);
        }
        match t {
            Some(t) if t != s => match (self.is_dir(s), self.is_dir(t)) {
                (true, false) => bad.push(libc::ENOTDIR),
                // Over a directory above the source Linux says ENOTEMPTY
                // before EISDIR.
                (false, true) => bad.extend([libc::EISDIR, libc::ENOTEMPTY]),
                (true, true) if !self.nodes[&t].entries.is_empty() => bad.extend([libc::ENOTEMPTY, libc::EEXIST]),
                _ => {}
            },
            // The same name, or two links of one file: nothing changes.
            Some(_) if bad.is_empty() => bad.push(0),
            _ => {}
        }
        if bad.is_empty() {
            Ok(())
        } else {
            Err(bad)
        }
    }

    pub fn renamed(&mut self, (sd, sn): (Ino, &[u8]), (dd, dn): (Ino, &[u8]), exchange: bool) {
        let s = self.entry(sd, sn).expect("a live name");
        if exchange {
            let t = self.entry(dd, dn).expect("a live name");
            self.nodes.get_mut(&sd).expect("a live directory").entries.insert(sn.to_vec(), t);
            self.nodes.get_mut(&dd).expect("a live directory").entries.insert(dn.to_vec(), s);
            if self.is_dir(t) {
                self.nodes.get_mut(&t).expect("a live directory").parent = sd;
            }
        } else {
            self.nodes.get_mut(&sd).expect("a live directory").entries.remove(sn);
            if let Some(old) = self.nodes.get_mut(&dd).expect("a live directory").entries.insert(dn.to_vec(), s) {
                self.unlinked(old);
            }
        }
        if self.is_dir(s) {
            self.nodes.get_mut(&s).expect("a live directory").parent = dd;
        }
    }
}
