//! In-memory inodes: attributes, extended attributes, and the body that
//! depends on the type (a file's layout tree, a directory's entries, a
//! symlink's target), with their encoding in the meta-file.

use crate::blocks::Layout;
use crate::codec::{Decoder, Encoder};
use crate::error::Result;
use crate::journal::Ino;
use parking_lot::RwLock;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::Arc;

pub const S_IFMT: u32 = libc::S_IFMT;
pub const S_IFREG: u32 = libc::S_IFREG;
pub const S_IFDIR: u32 = libc::S_IFDIR;
pub const S_IFLNK: u32 = libc::S_IFLNK;

/// Readdir offsets below this are "." and "..".
pub const FIRST_COOKIE: u64 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: Ino,
    /// File type bits (mode & S_IFMT) of the target, for d_type.
    pub kind: u32,
    /// Stable position for readdir while the entry exists.
    pub cookie: u64,
}

#[derive(Default, Clone)]
pub struct Dir {
    pub entries: HashMap<Vec<u8>, DirEntry>,
    pub by_cookie: BTreeMap<u64, Vec<u8>>,
    pub next_cookie: u64,
    pub parent: Ino,
    /// Default layout spec for files created beneath ("" = inherit).
    pub layout: String,
}

impl Dir {
    pub fn new(parent: Ino) -> Self {
        Dir { parent, next_cookie: FIRST_COOKIE, ..Default::default() }
    }
    pub fn insert(&mut self, name: Vec<u8>, ino: Ino, kind: u32) {
        if let Some(old) = self.entries.get(&name) {
            self.by_cookie.remove(&old.cookie);
        }
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        self.by_cookie.insert(cookie, name.clone());
        self.entries.insert(name, DirEntry { ino, kind, cookie });
    }
    pub fn remove(&mut self, name: &[u8]) -> Option<DirEntry> {
        let e = self.entries.remove(name)?;
        self.by_cookie.remove(&e.cookie);
        Some(e)
    }
    pub fn get(&self, name: &[u8]) -> Option<DirEntry> {
        self.entries.get(name).copied()
    }
}

#[derive(Clone)]
pub enum Body {
    File(Arc<Layout>),
    Dir(Dir),
    Symlink(Vec<u8>),
    /// Device nodes, FIFOs and sockets: attributes only.
    Special,
}

#[derive(Clone)]
pub struct InodeData {
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub btime: i64,
    pub rdev: u32,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    pub body: Body,
}

impl InodeData {
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
    pub fn kind(&self) -> u32 {
        self.mode & S_IFMT
    }
    pub fn dir(&self) -> Option<&Dir> {
        match &self.body {
            Body::Dir(d) => Some(d),
            _ => None,
        }
    }
    pub fn dir_mut(&mut self) -> Option<&mut Dir> {
        match &mut self.body {
            Body::Dir(d) => Some(d),
            _ => None,
        }
    }
    pub fn layout(&self) -> Option<&Arc<Layout>> {
        match &self.body {
            Body::File(l) => Some(l),
            _ => None,
        }
    }

    /// Attributes only (for permission checks), without the body.
    pub fn clone_meta(&self) -> InodeData {
        InodeData { xattrs: Default::default(), body: Body::Special, ..*self }
    }

    /// The inode record (directory entries are encoded separately, as
    /// directory blocks).
    pub fn encode(&self, e: &mut Encoder) {
        e.u32(self.mode).u32(self.uid).u32(self.gid).u32(self.nlink).u64(self.size);
        e.i64(self.atime).i64(self.mtime).i64(self.ctime).i64(self.btime).u32(self.rdev);
        e.u32(self.xattrs.len() as u32);
        for (k, v) in &self.xattrs {
            e.bytes(k).bytes(v);
        }
        match &self.body {
            Body::File(l) => {
                e.u8(1);
                l.encode(e);
            }
            Body::Dir(d) => {
                e.u8(2).u64(d.parent).str(&d.layout);
            }
            Body::Symlink(t) => {
                e.u8(3).bytes(t);
            }
            Body::Special => {
                e.u8(4);
            }
        }
    }

    pub fn decode(d: &mut Decoder) -> Result<InodeData> {
        let mode = d.u32()?;
        let uid = d.u32()?;
        let gid = d.u32()?;
        let nlink = d.u32()?;
        let size = d.u64()?;
        let atime = d.i64()?;
        let mtime = d.i64()?;
        let ctime = d.i64()?;
        let btime = d.i64()?;
        let rdev = d.u32()?;
        let nx = d.count(8)?;
        let mut xattrs = BTreeMap::new();
        for _ in 0..nx {
            let k = d.bytes()?.to_vec();
            let v = d.bytes()?.to_vec();
            xattrs.insert(k, v);
        }
        let body = match d.u8()? {
            1 => Body::File(Arc::new(Layout::decode(d)?)),
            2 => {
                let parent = d.u64()?;
                let layout = d.str()?.to_string();
                let mut dir = Dir::new(parent);
                dir.layout = layout;
                Body::Dir(dir)
            }
            3 => Body::Symlink(d.bytes()?.to_vec()),
            4 => Body::Special,
            t => return Err(d.err(format!("unknown inode body {t}"))),
        };
        let want = match &body {
            Body::File(_) => S_IFREG,
            Body::Dir(_) => S_IFDIR,
            Body::Symlink(_) => S_IFLNK,
            Body::Special => mode & S_IFMT,
        };
        if mode & S_IFMT != want || matches!(body, Body::Special if matches!(want, S_IFREG | S_IFDIR | S_IFLNK)) {
            return Err(d.err(format!("mode {mode:o} does not match the inode body")));
        }
        Ok(InodeData { mode, uid, gid, nlink, size, atime, mtime, ctime, btime, rdev, xattrs, body })
    }
}

/// An inode in the table. `data` is behind an `Arc` so multi-inode
/// operations can hold several write guards at once.
pub struct Inode {
    pub ino: Ino,
    pub data: Arc<RwLock<InodeData>>,
    /// Data I/O holds this shared; truncate and layout changes exclusive.
    pub io: RwLock<()>,
    /// Open handles: an unlinked inode lives until the last one closes.
    pub opens: AtomicU32,
    /// Times changed in memory and not yet logged.
    pub dirty_times: AtomicBool,
}

impl Inode {
    pub fn new(ino: Ino, data: InodeData) -> Self {
        Inode {
            ino,
            data: Arc::new(RwLock::new(data)),
            io: RwLock::new(()),
            opens: AtomicU32::new(0),
            dirty_times: AtomicBool::new(false),
        }
    }
}
