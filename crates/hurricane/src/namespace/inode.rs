//! In-memory inodes: attributes, extended attributes, and the body that
//! depends on the type (a file's layout tree, a directory's entries, a
//! symlink's target), with their encoding in the meta-file.

use super::store::MetaStore;
use crate::blocks::Layout;
use crate::codec::{Decoder, Encoder};
use crate::error::Result;
use crate::journal::Ino;
use parking_lot::RwLock;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, OnceLock};

pub const S_IFMT: u32 = libc::S_IFMT;
pub const S_IFREG: u32 = libc::S_IFREG;
pub const S_IFDIR: u32 = libc::S_IFDIR;
pub const S_IFLNK: u32 = libc::S_IFLNK;

/// Readdir offsets below this are "." and "..".
pub const FIRST_COOKIE: u64 = 3;

/// Room for changed names a settled directory may keep: smaller tables,
/// given back and taken again at every checkpoint, would cost more in
/// allocations than they hold.
const SETTLED_ROOM: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: Ino,
    /// File type bits (mode & S_IFMT) of the target, for d_type.
    pub kind: u32,
    /// Stable position for readdir while the entry exists.
    pub cookie: u64,
}

/// A directory: its own attributes of the namespace, and its entries as
/// the meta-data store has them at the last checkpoint plus the changes
/// made since (`names` by name, `cookies` by readdir position). Nothing is
/// loaded whole: a lookup reads the changes, then the store; a readdir
/// merges the store's entries in cookie order with the changes.
#[derive(Clone)]
pub struct Dir {
    /// This directory's inode number: its entries' key in the store.
    pub ino: Ino,
    pub parent: Ino,
    /// Default layout spec for files created beneath ("" = inherit).
    pub layout: String,
    /// The cookie the next entry gets (cookies only grow, so a readdir
    /// position stays valid across inserts and deletes).
    pub next_cookie: u64,
    /// Live entries.
    pub count: u64,
    names: HashMap<Name, Option<DirEntry>>,
    cookies: BTreeMap<u64, Option<Name>>,
    store: Option<Arc<MetaStore>>,
    /// A name its caller just found absent, under the lock it still holds
    /// ([`Dir::note_absent`]): the insert that follows need not ask the
    /// store again.
    absent: Option<Name>,
}

/// An entry's name in a directory's changes: shared by its name and cookie
/// changes and by the checkpoint that takes them, never copied.
pub type Name = Arc<[u8]>;

/// A directory's changes since the last checkpoint, as a checkpoint takes them.
pub struct DirChanges {
    pub names: Vec<(Name, Option<DirEntry>)>,
    pub cookies: Vec<(u64, Option<Name>)>,
}

impl Dir {
    /// A new, empty directory (its inode number is set when it enters the table).
    pub fn new(parent: Ino) -> Self {
        Dir {
            ino: 0,
            parent,
            layout: String::new(),
            next_cookie: FIRST_COOKIE,
            count: 0,
            names: HashMap::new(),
            cookies: BTreeMap::new(),
            store: None,
            absent: None,
        }
    }

    /// Binds the directory to its inode number and the store that holds its entries.
    pub fn attach(&mut self, ino: Ino, store: &Arc<MetaStore>) {
        self.ino = ino;
        self.store = Some(store.clone());
    }

    /// The entry called `name`.
    pub fn get(&self, name: &[u8]) -> Result<Option<DirEntry>> {
        if let Some(e) = self.names.get(name) {
            return Ok(*e);
        }
        match &self.store {
            Some(s) => Ok(s.lookup(self.ino, name)?.map(|e| DirEntry { ino: e.ino, kind: e.kind, cookie: e.cookie })),
            None => Ok(None),
        }
    }

    /// Records that `name` was just found absent by a caller that holds
    /// this directory's lock until its insert: that insert then skips the
    /// store's lookup (a create would otherwise search the B-tree twice
    /// for a name it knows is not there). Any other change forgets it.
    pub fn note_absent(&mut self, name: &[u8]) {
        self.absent = Some(name.into());
    }

    /// Adds (or replaces) the entry `name`. A new name takes the next
    /// cookie; a name replaced keeps its own (a rename over it, an
    /// exchange), so a listing that passed it does not meet it again.
    pub fn insert(&mut self, name: Vec<u8>, ino: Ino, kind: u32) -> Result<()> {
        self.insert_at(name, ino, kind, None)
    }

    /// [`Dir::insert`] of a name that takes over the place of an entry
    /// just removed from this directory (`cookie`, a rename within it),
    /// unless the name is there already.
    pub fn insert_at(&mut self, name: Vec<u8>, ino: Ino, kind: u32, cookie: Option<u64>) -> Result<()> {
        let known_absent = self.absent.take().is_some_and(|a| *a == *name);
        let old = if known_absent { None } else { self.get(&name)? };
        let cookie = match (old, cookie) {
            (Some(old), _) => {
                self.count = self.count.saturating_sub(1);
                old.cookie
            }
            (None, Some(c)) if c < self.next_cookie && matches!(self.cookies.get(&c), Some(None)) => c,
            _ => {
                self.next_cookie += 1;
                self.next_cookie - 1
            }
        };
        let name: Name = name.into();
        self.cookies.insert(cookie, Some(name.clone()));
        self.names.insert(name, Some(DirEntry { ino, kind, cookie }));
        self.count += 1;
        Ok(())
    }

    /// Removes the entry `name`, returning it.
    pub fn remove(&mut self, name: &[u8]) -> Result<Option<DirEntry>> {
        self.absent = None;
        let Some(e) = self.get(name)? else { return Ok(None) };
        self.names.insert(name.into(), None);
        self.cookies.insert(e.cookie, None);
        self.count = self.count.saturating_sub(1);
        Ok(Some(e))
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Entries with cookies from `from`, in cookie order, until `f` returns false.
    pub fn for_each_from(&self, from: u64, f: &mut dyn FnMut(u64, &[u8], DirEntry) -> bool) -> Result<()> {
        // The changes take precedence over the store, cookie by cookie
        // (between a checkpoint's commit and the clearing of what it
        // wrote, both hold the same entries).
        let mut changes = self.cookies.range(from..).peekable();
        let mut go = true;
        let emit_change = |c: u64, name: &Option<Name>, f: &mut dyn FnMut(u64, &[u8], DirEntry) -> bool| -> bool {
            match name {
                Some(n) => match self.names.get(&**n) {
                    Some(Some(e)) if e.cookie == c => f(c, n, *e),
                    _ => true,
                },
                None => true,
            }
        };
        if let Some(s) = &self.store {
            s.entries_from(self.ino, from, &mut |c, name, ino, kind| {
                while let Some((&cc, n)) = changes.next_if(|(&cc, _)| cc < c) {
                    if !emit_change(cc, n, f) {
                        go = false;
                        return Ok(false);
                    }
                }
                if let Some((&cc, n)) = changes.next_if(|(&cc, _)| cc == c) {
                    go = emit_change(cc, n, f);
                    return Ok(go);
                }
                go = f(c, name, DirEntry { ino, kind, cookie: c });
                Ok(go)
            })?;
        }
        if go {
            for (&c, n) in changes {
                if !emit_change(c, n, f) {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Every entry (for fsck and the whole-pool walks; a large directory
    /// costs its size in memory here).
    pub fn entries(&self) -> Result<Vec<(Vec<u8>, DirEntry)>> {
        let mut v = Vec::new();
        self.for_each_from(0, &mut |_, n, e| {
            v.push((n.to_vec(), e));
            true
        })?;
        Ok(v)
    }

    /// The changed entry `name` (what a changed cookie refers to).
    pub fn names_entry(&self, name: &[u8]) -> Option<DirEntry> {
        self.names.get(name).copied().flatten()
    }

    pub fn has_changes(&self) -> bool {
        !self.names.is_empty() || !self.cookies.is_empty()
    }

    /// The changes since the last checkpoint.
    pub fn changes(&self) -> DirChanges {
        DirChanges {
            names: self.names.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            cookies: self.cookies.iter().map(|(k, v)| (*k, v.clone())).collect(),
        }
    }

    /// Forgets the changes a committed checkpoint wrote, unless they
    /// changed again since it took them.
    pub fn settle(&mut self, c: &DirChanges) {
        self.absent = None;
        for (k, v) in &c.names {
            if self.names.get(k) == Some(v) {
                self.names.remove(k);
            }
        }
        for (k, v) in &c.cookies {
            if self.cookies.get(k) == Some(v) {
                self.cookies.remove(k);
            }
        }
        // A hash table keeps its room when emptied: a directory that took a
        // thousand creates between two checkpoints would hold room for a
        // thousand names (about 12 KiB) for as long as it stays cached, which
        // across ten thousand directories is more than the inode cache's
        // own share of memory. The room goes back once the changes settle.
        let live = self.names.len();
        if self.names.capacity() > 4 * live.max(SETTLED_ROOM) {
            self.names.shrink_to(2 * live);
        }
    }

    /// The room the table of changed names holds.
    #[cfg(test)]
    pub(crate) fn names_room(&self) -> usize {
        self.names.capacity()
    }
}

/// A regular file's layout tree. An inode read from the store or created
/// by a replayed op keeps the tree's encoding, and the live tree is built
/// the first time something needs it (data I/O, a layout query, fsck):
/// meta-data work on files (lookup, stat, chmod, rename, unlink) builds
/// none, and a checkpoint writes the bytes of a tree never built as they
/// were. Once built, the tree is what is encoded (its state moves on).
#[derive(Clone)]
pub struct FileLayout {
    raw: Box<[u8]>,
    /// What `st_blocks` needs when the tree is not built: the device blocks
    /// its extents hold, and whether it keeps data in the record (inline).
    /// `None` for records written before format 5, which did not carry it.
    usage: Option<Usage>,
    tree: OnceLock<Arc<Layout>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Usage {
    blocks: u64,
    inline: bool,
}

impl Usage {
    fn of(t: &Layout) -> Usage {
        let mut blocks = 0u64;
        t.extents(&mut |_, _, n| blocks = blocks.saturating_add(n));
        Usage { blocks, inline: t.root().holds_data_in_metadata() }
    }
}

impl FileLayout {
    /// A tree's encoding (`Layout::encode`) for a new file, which holds no
    /// data yet; built on first use.
    pub fn new_file(raw: Vec<u8>) -> Result<FileLayout> {
        let inline = Layout::root_type(&raw)?.in_metadata;
        Ok(FileLayout { raw: raw.into_boxed_slice(), usage: Some(Usage { blocks: 0, inline }), tree: OnceLock::new() })
    }
    /// The live tree, built now if it was not yet. A damaged encoding is an
    /// error (`Error::Corrupt`), every time it is asked for.
    pub fn get(&self) -> Result<&Arc<Layout>> {
        if let Some(t) = self.tree.get() {
            return Ok(t);
        }
        let t = self.build()?;
        // Two first users may both build it: one tree wins, for both.
        Ok(self.tree.get_or_init(|| Arc::new(t)))
    }
    /// The live tree where it is built, else one built now and not kept:
    /// for walks of the whole pool (health), which would otherwise leave
    /// every file's tree in the inode cache, where a tree costs more than
    /// the rest of the inode (at a million files through the mount, 170
    /// MiB of trees nobody used again).
    pub fn peek(&self) -> Result<Arc<Layout>> {
        match self.tree.get() {
            Some(t) => Ok(t.clone()),
            None => self.build().map(Arc::new),
        }
    }
    /// A tree built from the encoding.
    fn build(&self) -> Result<Layout> {
        let mut d = Decoder::new(&self.raw, "layout tree");
        let t = Layout::decode(&mut d)?;
        d.expect_end()?;
        Ok(t)
    }
    /// Whether the file owns device space: a file freed without ever being
    /// built (an empty one, say) has none to give back, and is not built.
    pub fn holds_space(&self) -> Result<bool> {
        Ok(self.usage()?.blocks > 0)
    }
    /// The tree's usage now: from the tree where it is built, else as the
    /// record carried it, else (a format-4 record) from the tree built now.
    fn usage(&self) -> Result<Usage> {
        Ok(match (self.tree.get(), self.usage) {
            (Some(t), _) => Usage::of(t),
            (None, Some(u)) => u,
            (None, None) => Usage::of(self.get()?),
        })
    }
    /// Whether the live tree has been built.
    pub fn is_built(&self) -> bool {
        self.tree.get().is_some()
    }
    /// `st_blocks` (512-byte units) of a file of `size` bytes: its extents'
    /// blocks, or for a file kept in its record, its size rounded up.
    pub fn sectors(&self, size: u64) -> Result<u64> {
        let u = self.usage()?;
        Ok(if u.blocks == 0 && size > 0 && u.inline { size.div_ceil(512) } else { u.blocks.saturating_mul(8) })
    }
    /// Body tag 5 (usage, then the tree), or tag 1 (the tree alone) for a
    /// record of an earlier format whose tree was never built.
    fn encode_body(&self, e: &mut Encoder) {
        let usage = self.tree.get().map(|t| Usage::of(t)).or(self.usage);
        match usage {
            Some(u) => {
                e.u8(5).var(u.blocks).u8(u8::from(u.inline));
            }
            None => {
                e.u8(1);
            }
        }
        match self.tree.get() {
            Some(t) => t.encode(e),
            None => {
                e.raw(&self.raw);
            }
        }
    }
}

#[derive(Clone)]
pub enum Body {
    File(FileLayout),
    /// Boxed: a directory's state is three times a file's, and every
    /// cached inode would otherwise hold room for it.
    Dir(Box<Dir>),
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
    /// A regular file's live layout tree (built now if it was not yet);
    /// `None` for other types.
    pub fn layout(&self) -> Result<Option<&Arc<Layout>>> {
        match &self.body {
            Body::File(l) => l.get().map(Some),
            _ => Ok(None),
        }
    }
    /// A regular file's layout tree for a look that need not keep it
    /// ([`FileLayout::peek`]); `None` for other types.
    pub fn peek_layout(&self) -> Result<Option<Arc<Layout>>> {
        match &self.body {
            Body::File(l) => l.peek().map(Some),
            _ => Ok(None),
        }
    }
    pub fn is_file(&self) -> bool {
        matches!(self.body, Body::File(_))
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
            Body::File(l) => l.encode_body(e),
            Body::Dir(d) => {
                e.u8(2).u64(d.parent).str(&d.layout).u64(d.next_cookie).u64(d.count);
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
            // The tree runs to the end of the record; it is built (and
            // checked) when first used. Tag 1: records of format 4.
            1 => Body::File(FileLayout {
                raw: d.take(d.remaining())?.to_vec().into_boxed_slice(),
                usage: None,
                tree: OnceLock::new(),
            }),
            5 => {
                let blocks = d.var()?;
                let inline = match d.u8()? {
                    0 => false,
                    1 => true,
                    v => return Err(d.err(format!("inline flag {v}"))),
                };
                let raw = d.take(d.remaining())?.to_vec().into_boxed_slice();
                Body::File(FileLayout { raw, usage: Some(Usage { blocks, inline }), tree: OnceLock::new() })
            }
            2 => {
                let parent = d.u64()?;
                let layout = d.str()?.to_string();
                let mut dir = Dir::new(parent);
                dir.layout = layout;
                dir.next_cookie = d.u64()?;
                dir.count = d.u64()?;
                if dir.next_cookie < FIRST_COOKIE || dir.count > dir.next_cookie - FIRST_COOKIE {
                    return Err(
                        d.err(format!("directory with {} entries and next cookie {}", dir.count, dir.next_cookie))
                    );
                }
                Body::Dir(Box::new(dir))
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
    /// The directory this inode was last reached through (0: none since it
    /// was loaded): where a mount finds the directory default of its open
    /// spec, the kernel naming only the inode when it opens a file.
    pub parent_hint: AtomicU64,
}

impl Inode {
    pub fn new(ino: Ino, data: InodeData) -> Self {
        Inode {
            ino,
            data: Arc::new(RwLock::new(data)),
            io: RwLock::new(()),
            opens: AtomicU32::new(0),
            dirty_times: AtomicBool::new(false),
            parent_hint: AtomicU64::new(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_gives_back_the_room_of_its_settled_changes() {
        let mut d = Dir::new(1);
        for i in 0..1000u64 {
            d.insert(format!("f{i}").into_bytes(), 100 + i, S_IFREG).unwrap();
        }
        assert!(d.names_room() >= 1000);
        let c = d.changes();
        // A name changed again after the checkpoint took the changes stays.
        d.remove(b"f7").unwrap();
        d.settle(&c);
        assert!(d.has_changes());
        assert_eq!(d.names_entry(b"f7"), None);
        assert!(d.names_room() <= 4 * SETTLED_ROOM, "{} slots kept for 1 change", d.names_room());
        // What is left still reads back: the removal, and nothing else.
        let c = d.changes();
        assert_eq!(c.names.len(), 1);
        assert_eq!(c.names[0], (Name::from(&b"f7"[..]), None));
        d.settle(&c);
        assert!(!d.has_changes());
        assert!(d.names_room() <= 4 * SETTLED_ROOM);
    }

    #[test]
    fn a_settled_directory_with_changes_left_keeps_them_all() {
        let mut d = Dir::new(1);
        for i in 0..100u64 {
            d.insert(format!("f{i}").into_bytes(), 100 + i, S_IFREG).unwrap();
        }
        let c = d.changes();
        // Half of the names change again before the checkpoint settles.
        for i in 0..50u64 {
            d.insert(format!("f{i}").into_bytes(), 1000 + i, S_IFREG).unwrap();
        }
        d.settle(&c);
        for i in 0..50u64 {
            assert_eq!(d.names_entry(format!("f{i}").as_bytes()).map(|e| e.ino), Some(1000 + i));
        }
        for i in 50..100u64 {
            assert_eq!(d.names_entry(format!("f{i}").as_bytes()), None);
        }
    }
}
