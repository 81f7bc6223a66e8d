//! What a workload believes the pool holds (the model), and what a pool
//! opened after a crash actually holds, in one comparable form.

use crate::error::{Error, Result};
use crate::namespace::Creds;
use crate::Fs;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;

/// File type as the checker compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File,
    Symlink,
}

/// Everything about a path that is meta-data: after a crash it must be
/// exactly as of one committed state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Meta {
    pub kind: Kind,
    pub perm: u32,
    /// Links of a file (0 for directories: fsck checks theirs).
    pub nlink: u32,
    pub size: u64,
    pub target: Vec<u8>,
    /// (name, checksum of value).
    pub xattrs: Vec<(Vec<u8>, u32)>,
    /// A file's layout, or a directory's default layout for new files.
    pub layout: String,
}

/// One path of a tree: its meta-data, the checksum of its contents and, in
/// the model, which file (content identity across links and renames) it is.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub meta: Meta,
    pub crc: u32,
    pub file: Option<u64>,
}

pub(crate) type Tree = BTreeMap<String, Seen>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Node {
    Dir { perm: u32, layout: String },
    File(u64),
    Symlink(Vec<u8>),
}

#[derive(Debug, Clone)]
pub(crate) struct MFile {
    pub data: Vec<u8>,
    pub crc: u32,
    pub perm: u32,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    pub layout: String,
}

impl MFile {
    pub fn new(data: Vec<u8>, layout: String) -> Self {
        MFile { crc: crc32c::crc32c(&data), data, perm: 0o644, xattrs: BTreeMap::new(), layout }
    }
    pub fn set(&mut self, data: Vec<u8>) {
        self.crc = crc32c::crc32c(&data);
        self.data = data;
    }
    /// Writes `buf` at `off`, zero-filling a gap.
    pub fn write(&mut self, off: usize, buf: &[u8]) {
        let mut d = std::mem::take(&mut self.data);
        if d.len() < off + buf.len() {
            d.resize(off + buf.len(), 0);
        }
        d[off..off + buf.len()].copy_from_slice(buf);
        self.set(d);
    }
    pub fn truncate(&mut self, len: usize) {
        let mut d = std::mem::take(&mut self.data);
        d.resize(len, 0);
        self.set(d);
    }
}

/// Paths (absolute) to nodes; files by id so hard links share contents.
#[derive(Debug, Clone, Default)]
pub(crate) struct Model {
    pub paths: BTreeMap<String, Node>,
    pub files: HashMap<u64, MFile>,
}

impl Model {
    pub fn tree(&self) -> Tree {
        let mut links: HashMap<u64, u32> = HashMap::new();
        for n in self.paths.values() {
            if let Node::File(id) = n {
                *links.entry(*id).or_default() += 1;
            }
        }
        self.paths
            .iter()
            .map(|(p, n)| {
                let s = match n {
                    Node::Dir { perm, layout } => Seen {
                        meta: Meta {
                            kind: Kind::Dir,
                            perm: *perm,
                            nlink: 0,
                            size: 0,
                            target: Vec::new(),
                            xattrs: Vec::new(),
                            layout: layout.clone(),
                        },
                        crc: 0,
                        file: None,
                    },
                    Node::Symlink(t) => Seen {
                        meta: Meta {
                            kind: Kind::Symlink,
                            perm: 0o777,
                            nlink: 1,
                            size: t.len() as u64,
                            target: t.clone(),
                            xattrs: Vec::new(),
                            layout: String::new(),
                        },
                        crc: 0,
                        file: None,
                    },
                    Node::File(id) => {
                        let f = &self.files[id];
                        Seen {
                            meta: Meta {
                                kind: Kind::File,
                                perm: f.perm,
                                nlink: links[id],
                                size: f.data.len() as u64,
                                target: Vec::new(),
                                xattrs: f.xattrs.iter().map(|(k, v)| (k.clone(), crc32c::crc32c(v))).collect(),
                                layout: f.layout.clone(),
                            },
                            crc: f.crc,
                            file: Some(*id),
                        }
                    }
                };
                (p.clone(), s)
            })
            .collect()
    }

    /// Paths strictly beneath `dir`.
    pub fn under(&self, dir: &str) -> Vec<String> {
        let pre = format!("{dir}/");
        self.paths.range(pre.clone()..).take_while(|(p, _)| p.starts_with(&pre)).map(|(p, _)| p.clone()).collect()
    }

    /// Moves `from` (and what lies beneath it) to `to`.
    pub fn move_tree(&mut self, from: &str, to: &str) {
        let mut moved = vec![(to.to_string(), self.paths.remove(from))];
        for p in self.under(from) {
            let n = self.paths.remove(&p);
            moved.push((format!("{to}{}", &p[from.len()..]), n));
        }
        for (p, n) in moved {
            if let Some(n) = n {
                self.paths.insert(p, n);
            }
        }
    }

    /// Removes a path (and what lies beneath it); drops files left unlinked.
    pub fn remove(&mut self, path: &str) {
        for p in self.under(path) {
            self.paths.remove(&p);
        }
        if let Some(Node::File(id)) = self.paths.remove(path) {
            if !self.paths.values().any(|n| *n == Node::File(id)) {
                self.files.remove(&id);
            }
        }
    }

    /// POSIX rename of `from` onto `to` (which may exist and is replaced).
    pub fn rename(&mut self, from: &str, to: &str) {
        if from == to {
            return;
        }
        if let (Some(Node::File(a)), Some(Node::File(b))) = (self.paths.get(from), self.paths.get(to)) {
            if a == b {
                // Two links of one inode: POSIX says do nothing.
                return;
            }
        }
        if self.paths.contains_key(to) {
            self.remove(to);
        }
        self.move_tree(from, to);
    }

    /// RENAME_EXCHANGE.
    pub fn exchange(&mut self, a: &str, b: &str) {
        let tmp = format!("{a}\u{1}swap");
        self.move_tree(a, &tmp);
        self.move_tree(b, a);
        self.move_tree(&tmp, b);
    }

    pub fn file(&mut self, path: &str) -> Option<(u64, &mut MFile)> {
        match self.paths.get(path) {
            Some(Node::File(id)) => {
                let id = *id;
                self.files.get_mut(&id).map(|f| (id, f))
            }
            _ => None,
        }
    }

    pub fn is_dir(&self, path: &str) -> bool {
        path.is_empty() || matches!(self.paths.get(path), Some(Node::Dir { .. }))
    }
}

/// Reads the whole tree of an open pool (as root).
pub(crate) fn observe(fs: &Fs) -> Result<Tree> {
    let root = Creds::root();
    let mut out = Tree::new();
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let items = fs.read_dir(if dir.is_empty() { "/" } else { &dir })?;
        for e in items {
            let name = String::from_utf8(e.name.clone())
                .map_err(|_| Error::Invalid(format!("{dir}: entry name not UTF-8")))?;
            let path = format!("{dir}/{name}");
            let a = fs.lstat(&path)?;
            let mut xattrs = Vec::new();
            for k in fs.listxattr(&root, a.ino)? {
                let v = fs.getxattr(&root, a.ino, &k)?;
                xattrs.push((k, crc32c::crc32c(&v)));
            }
            xattrs.sort();
            let perm = a.mode & 0o7777;
            let seen = if a.is_dir() {
                stack.push(path.clone());
                let layout = fs.dir_layout_get(a.ino)?;
                Seen {
                    meta: Meta { kind: Kind::Dir, perm, nlink: 0, size: 0, target: Vec::new(), xattrs, layout },
                    crc: 0,
                    file: None,
                }
            } else if a.is_symlink() {
                let t = fs.readlink(a.ino)?;
                let meta = Meta {
                    kind: Kind::Symlink,
                    perm: 0o777,
                    nlink: a.nlink,
                    size: a.size,
                    target: t,
                    xattrs,
                    layout: String::new(),
                };
                Seen { meta, crc: 0, file: None }
            } else {
                let data = fs.read_file(&path)?;
                if data.len() as u64 != a.size {
                    return Err(Error::corrupt(path, format!("read {} bytes of a {}-byte file", data.len(), a.size)));
                }
                let layout = fs.layout_get(a.ino)?;
                let meta =
                    Meta { kind: Kind::File, perm, nlink: a.nlink, size: a.size, target: Vec::new(), xattrs, layout };
                Seen { meta, crc: crc32c::crc32c(&data), file: None }
            };
            out.insert(path, seen);
        }
    }
    Ok(out)
}

/// The part of `t` beneath `prefix` ("" = all).
pub(crate) fn subtree(t: &Tree, prefix: &str) -> Tree {
    if prefix.is_empty() {
        return t.clone();
    }
    let pre = format!("{prefix}/");
    t.range(pre.clone()..).take_while(|(p, _)| p.starts_with(&pre)).map(|(p, s)| (p.clone(), s.clone())).collect()
}

/// Same paths with the same meta-data.
pub(crate) fn same_meta(got: &Tree, want: &Tree) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|((p, a), (q, b))| p == q && a.meta == b.meta)
}

/// Paths whose contents differ, among files not in `touched`.
pub(crate) fn content_diffs(got: &Tree, want: &Tree, touched: &HashSet<u64>) -> Vec<String> {
    let mut out = Vec::new();
    for (p, w) in want {
        let Some(id) = w.file else { continue };
        if touched.contains(&id) {
            continue;
        }
        if let Some(g) = got.get(p) {
            if g.crc != w.crc {
                out.push(format!(
                    "{p}: contents differ ({} bytes, crc {:08x}, want {:08x})",
                    w.meta.size, g.crc, w.crc
                ));
            }
        }
    }
    out
}

/// A short description of how two trees differ (for violation reports).
pub(crate) fn describe_diff(got: &Tree, want: &Tree) -> String {
    let mut s = String::new();
    let mut n = 0;
    for (p, w) in want {
        match got.get(p) {
            None => {
                n += 1;
                if n <= 6 {
                    let _ = write!(s, "missing {p} ({:?}); ", w.meta.kind);
                }
            }
            Some(g) if g.meta != w.meta => {
                n += 1;
                if n <= 6 {
                    let _ = write!(s, "{p}: have {:?}, want {:?}; ", g.meta, w.meta);
                }
            }
            _ => {}
        }
    }
    for (p, g) in got {
        if !want.contains_key(p) {
            n += 1;
            if n <= 6 {
                let _ = write!(s, "unexpected {p} ({:?}); ", g.meta.kind);
            }
        }
    }
    if n > 6 {
        let _ = write!(s, "and {} more", n - 6);
    }
    s
}
