//! Salvage: copies every file still reachable from a damaged pool out to a
//! [`Sink`] (`hurricane recover POOL DEST` writes them to a directory),
//! reading only, with a list of what could not be saved. The anchors are
//! `btrfs restore` and `zpool import -F`: take what can be read, say what
//! could not, write nothing to the pool.
//!
//! The pool is opened read-only ([`Source::open`]): the journal is replayed
//! in memory, so the files are as last committed. A pool that will not
//! open that way (a damaged free map, journal or log table) is read from
//! its last checkpoint alone: the meta-data store through its B-tree roots,
//! without the journal. A store whose roots cannot be read is an error that
//! says so: nothing then names the files.
//!
//! The walk goes from the root, depth first, and tolerates errors item by
//! item:
//! - an inode whose record cannot be read is listed as not saved;
//! - a directory's entries are read in cookie order, and, where that fails,
//!   from the names table, which indexes the same entries by name; a
//!   directory neither lists whole is saved with the entries read and
//!   listed as saved in part;
//! - a file is copied block by block where a larger read fails: blocks no
//!   copy holds intact are left as holes (they read as zeros) and the file
//!   is listed with its unreadable byte ranges, as `btrfs restore` keeps
//!   what it can;
//! - hard links are handed over as links to the first path saved;
//! - inodes the walk did not reach (their directory could not be read)
//!   that still have links are saved under `lost+found` in the sink as
//!   `#INODE`, when the inode table can be listed.
//!
//! Writing is the sink's: it decides how modes, owners and times land
//! (the CLI's never follows links in its destination and never makes a
//! set-id file for another user).

use crate::base::{Ino, BLOCK_SIZE};
use crate::blocks::{IoCtx, Layout};
use crate::codec::Decoder;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::fs::{Attr, Fs, Options};
use crate::namespace::inode::{S_IFDIR, S_IFLNK, S_IFREG};
use crate::namespace::store::{MetaFile, MetaStore};
use crate::namespace::{Body, Dir, InodeData, ROOT};
use crate::pool::{Allocator, Storage};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

const BS: u64 = BLOCK_SIZE as u64;
/// File blocks read at a time before falling back to one at a time.
const CHUNK_BLOCKS: u64 = 256;
/// Where inodes the walk did not reach go in the sink.
pub const LOST_FOUND: &str = "lost+found";

/// Where salvaged items go. Paths are relative to the destination's top,
/// their components joined by `/` (names are bytes, as the pool keeps
/// them). A directory comes before anything in it, and `dir_done` after.
/// An error from the sink is listed against the item, and the walk goes on.
pub trait Sink {
    /// A directory (the top one has the empty path).
    fn dir(&mut self, path: &[u8], attr: &Attr) -> std::io::Result<()>;
    /// Everything in the directory was handed over: its times may be set.
    fn dir_done(&mut self, path: &[u8], attr: &Attr) -> std::io::Result<()>;
    /// A regular file begins; its readable bytes follow as `data`.
    fn file(&mut self, path: &[u8], attr: &Attr) -> std::io::Result<()>;
    /// Bytes of the file begun last, at `off` (unreadable ranges are
    /// skipped: they stay holes).
    fn data(&mut self, off: u64, data: &[u8]) -> std::io::Result<()>;
    /// The file begun last is whole: its size, mode and times may be set.
    fn file_done(&mut self, attr: &Attr) -> std::io::Result<()>;
    /// Another name for the file saved at `existing`.
    fn hard_link(&mut self, path: &[u8], existing: &[u8]) -> std::io::Result<()>;
    fn symlink(&mut self, path: &[u8], target: &[u8], attr: &Attr) -> std::io::Result<()>;
    /// A device node, FIFO or socket.
    fn special(&mut self, path: &[u8], attr: &Attr) -> std::io::Result<()>;
}

/// What a salvage saved and what it could not.
#[derive(Debug, Clone, Default)]
pub struct SalvageReport {
    pub dirs: u64,
    pub files: u64,
    pub symlinks: u64,
    pub specials: u64,
    /// Hard links handed over as links.
    pub links: u64,
    /// File bytes copied.
    pub bytes: u64,
    /// Items saved under [`LOST_FOUND`] (not reachable from the root).
    pub unreachable: u64,
    /// What could not be saved, whole or at all: path and why.
    pub lost: Vec<(String, String)>,
    /// How the pool was read, and other things worth knowing.
    pub notes: Vec<String>,
}

impl SalvageReport {
    /// True when everything reachable was saved whole.
    pub fn is_complete(&self) -> bool {
        self.lost.is_empty()
    }
}

/// Progress of a salvage: the report so far and the path just handled.
pub type Progress<'a> = &'a mut dyn FnMut(&SalvageReport, &[u8]);

/// A pool opened for salvage, read-only.
///
/// The store stops reading after its first I/O error (redb refuses every
/// later read until it is opened again), so reads that fail are tried
/// again through a store opened afresh over the same meta-file, read-only
/// (its writes kept in memory), and opened afresh again after each error.
pub struct Source {
    /// The pool, when it opened (its journal replayed in memory): inodes
    /// it holds changed since the checkpoint come from it.
    fs: Option<Fs>,
    storage: Arc<Storage>,
    /// The meta-file's tree (encoded) and length.
    meta: (Vec<u8>, u64),
    /// The store reads go to when the pool's own fails, or always when the
    /// pool did not open.
    store: Mutex<Option<Arc<MetaStore>>>,
    notes: Vec<String>,
}

impl Source {
    /// Opens the pool on `devs` read-only, or, when it will not open so,
    /// its last checkpoint alone.
    pub fn open(devs: Vec<Arc<dyn Device>>) -> Result<Source> {
        let opts = Options { read_only: true, background_commit: false, ..Options::default() };
        match Fs::open(devs.clone(), opts) {
            Ok(fs) => Ok(Source::of(fs)),
            Err(e) => Self::checkpoint(devs, e),
        }
    }

    /// [`Source::open`] for the pool in directory `dir`.
    pub fn open_dir(dir: &Path) -> Result<Source> {
        let opts = Options { read_only: true, background_commit: false, ..Options::default() };
        match Fs::open_dir(dir, opts) {
            Ok(fs) => Ok(Source::of(fs)),
            Err(e) => {
                let paths = crate::pool::device_paths(dir)?;
                let devs = crate::pool::open_paths(&paths, false)?;
                Self::checkpoint(devs, e)
            }
        }
    }

    /// Salvage from a pool already open (read-only is best: a writable
    /// open may repair what it reads).
    pub fn of(fs: Fs) -> Source {
        let storage = fs.inner.storage.clone();
        let meta = fs.state().store().file().describe();
        Source { fs: Some(fs), storage, meta, store: Mutex::new(None), notes: Vec::new() }
    }

    /// The last checkpoint of the pool on `devs`, which would not open
    /// (`why`): its store through its B-tree roots, without the journal.
    fn checkpoint(devs: Vec<Arc<dyn Device>>, why: Error) -> Result<Source> {
        tracing::warn!("the pool does not open ({why}): reading its last checkpoint alone");
        let (sb, handles) = crate::pool::identify(devs)?;
        let allocs: Vec<Allocator> =
            handles.iter().map(|h| Allocator::new(crate::pool::RESERVED_BLOCKS, h.blocks())).collect();
        let storage = Arc::new(Storage { devs: handles.into(), allocs: allocs.into() });
        let notes = vec![format!(
            "the pool does not open ({why}): read from its last checkpoint, without the journal (changes committed after it are not there)"
        )];
        let src = Source { fs: None, storage, meta: (sb.meta_layout, sb.meta_len), store: Mutex::new(None), notes };
        src.fresh().map_err(|e| {
            Error::corrupt(
                "meta-data store",
                format!(
                    "the pool does not open ({why}), and its meta-data store cannot be opened through its B-tree roots ({e}): nothing names its files any more"
                ),
            )
        })?;
        Ok(src)
    }

    /// Opens the store afresh over the meta-file, read-only.
    fn fresh(&self) -> Result<Arc<MetaStore>> {
        let layout = Layout::decode(&mut Decoder::new(&self.meta.0, "meta-file layout"))?;
        let file = MetaFile::new(self.storage.clone(), layout, self.meta.1, true);
        let store = Arc::new(MetaStore::open(file, 16 << 20, 0, 1)?);
        *self.store.lock() = Some(store.clone());
        Ok(store)
    }

    /// `f` on the salvage store; after an error, once more on a store
    /// opened afresh (the error may be the one before, which the store
    /// keeps answering with).
    fn with_store<T>(&self, f: impl Fn(&Arc<MetaStore>) -> Result<T>) -> Result<T> {
        let current = self.store.lock().clone();
        let first = match current {
            Some(s) => f(&s),
            None => f(&self.fresh()?),
        };
        match first {
            Ok(v) => Ok(v),
            Err(_) => {
                let r = f(&self.fresh()?);
                if r.is_err() {
                    // Left clean for the next read.
                    let _ = self.fresh();
                }
                r
            }
        }
    }

    /// The pool, when it opened.
    pub fn fs(&self) -> Option<&Fs> {
        self.fs.as_ref()
    }

    /// Closes the pool (nothing is written: it was opened read-only).
    pub fn close(self) -> Result<()> {
        match self.fs {
            Some(fs) => fs.close(),
            None => Ok(()),
        }
    }

    fn inode(&self, ino: Ino) -> Result<Option<InodeData>> {
        if let Some(fs) = &self.fs {
            if let Ok(n) = fs.state().try_get(ino) {
                return Ok(n.map(|n| n.data.read().clone()));
            }
        }
        self.with_store(|store| {
            let Some(rec) = store.inode(ino)? else { return Ok(None) };
            let mut d = Decoder::new(&rec, "inode record");
            let mut data = InodeData::decode(&mut d)?;
            d.expect_end()?;
            if let Some(dir) = data.dir_mut() {
                dir.attach(ino, store);
            }
            Ok(Some(data))
        })
    }

    /// Every inode number the table lists. Where a page of it cannot be
    /// read, the listing goes on past it (the numbers on that page are
    /// lost); the error says that happened.
    fn inos(&self) -> (Vec<Ino>, Option<String>) {
        if let Some(fs) = &self.fs {
            if let Ok(v) = fs.state().inos() {
                return (v, None);
            }
        }
        let mut v: Vec<Ino> = Vec::new();
        let mut err: Option<String> = None;
        let mut from = 0;
        // Whether a listing from `k` can read its first page (each try on
        // a store opened afresh).
        let readable = |k: Ino| self.fresh().and_then(|s| s.inos_from(k, &mut |_| false)).is_ok();
        for _ in 0..10_000 {
            let store = match self.fresh() {
                Ok(s) => s,
                Err(e) => {
                    err.get_or_insert_with(|| e.to_string());
                    break;
                }
            };
            let before = v.len();
            let Err(e) = store.inos_from(from, &mut |i| {
                v.push(i);
                true
            }) else {
                break;
            };
            err.get_or_insert_with(|| e.to_string());
            if v.len() > before {
                from = v[v.len() - 1] + 1;
            }
            // Past the page that failed: the smallest start whose first
            // page reads (found by doubling, then halving).
            let mut step = 1u64;
            while !readable(from.saturating_add(step)) {
                if step >= 1 << 40 {
                    return (v, err);
                }
                step *= 2;
            }
            let (mut lo, mut hi) = (from, from.saturating_add(step));
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if readable(mid) {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            from = hi;
        }
        let _ = self.fresh();
        (v, err)
    }

    /// A directory's entries: in cookie order, and where that fails from
    /// the names table too. The error says what could not be read.
    fn entries(&self, d: &Dir) -> (Vec<(Vec<u8>, Ino)>, Option<String>) {
        let mut v: BTreeMap<Vec<u8>, Ino> = BTreeMap::new();
        let by_cookie = |d: &Dir, v: &mut BTreeMap<Vec<u8>, Ino>| {
            d.for_each_from(0, &mut |_, n, e| {
                v.insert(n.to_vec(), e.ino);
                true
            })
        };
        let mut first = by_cookie(d, &mut v);
        if first.is_err() {
            // Once more through a store opened afresh (the changes since
            // the checkpoint stay with the directory).
            if let Ok(store) = self.fresh() {
                let mut again = d.clone();
                again.attach(d.ino, &store);
                first = by_cookie(&again, &mut v);
            }
        }
        let Err(e1) = first else { return (v.into_iter().collect(), None) };
        let before = v.len();
        // On a store opened afresh: the failure above left the last one
        // refusing every read.
        let mut names = Vec::new();
        let second = self.fresh().and_then(|s| s.entries_by_name(d.ino, &mut |n, e| names.push((n.to_vec(), e.ino))));
        if second.is_err() {
            let _ = self.fresh();
        }
        let changes = d.changes();
        let changed: HashMap<&[u8], Option<Ino>> =
            changes.names.iter().map(|(n, e)| (&**n, e.as_ref().map(|e| e.ino))).collect();
        for (n, ino) in names {
            // Changes since the checkpoint come first (a removed name stays removed).
            match changed.get(&n[..]) {
                Some(Some(i)) => v.insert(n, *i),
                Some(None) => None,
                None => v.insert(n, ino),
            };
        }
        for (n, e) in &changes.names {
            if let Some(e) = e {
                v.insert(n.to_vec(), e.ino);
            }
        }
        let err = match second {
            Ok(()) => {
                tracing::warn!(
                    "directory inode {}: {e1}; listed from the names table ({} entries, {before} read in order)",
                    d.ino,
                    v.len()
                );
                None
            }
            Err(e2) => Some(format!("its entries could not all be read ({} saved): {e1}; by name: {e2}", v.len())),
        };
        (v.into_iter().collect(), err)
    }

    fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Copies every file reachable from the root to `sink`, then the
    /// linked inodes the walk did not reach under [`LOST_FOUND`].
    pub fn salvage(&self, sink: &mut dyn Sink, progress: Progress) -> Result<SalvageReport> {
        let mut w =
            Walk { src: self, sink, rep: SalvageReport::default(), seen: HashSet::new(), links: HashMap::new() };
        w.rep.notes = self.notes.clone();
        w.seen.insert(ROOT);
        let mut root_names = HashSet::new();
        // lost+found is made owner-only, with the root's times when known.
        let mut lf_attr = Attr {
            ino: ROOT,
            size: 0,
            blocks: 0,
            atime: 0,
            mtime: 0,
            ctime: 0,
            btime: 0,
            mode: S_IFDIR | 0o700,
            nlink: 2,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: BLOCK_SIZE as u32,
        };
        match self.inode(ROOT) {
            Ok(Some(root)) if root.is_dir() => {
                if let Some(d) = root.dir() {
                    root_names = self.entries(d).0.into_iter().map(|e| e.0).collect();
                }
                lf_attr = Attr { mode: S_IFDIR | 0o700, ..attr(ROOT, &root) };
                w.tree(Vec::new(), ROOT, root, progress);
            }
            // Without the root, what the inode table lists is saved by number.
            r => {
                let why = match r {
                    Err(e) => format!("the root directory could not be read: {e}"),
                    _ => "the root directory is missing".to_string(),
                };
                if let Err(e) = w.sink.dir(b"", &lf_attr) {
                    return Err(Error::RawIo(e));
                }
                w.lost("/".into(), why);
            }
        }
        // Linked inodes nothing reachable names (their directory could not
        // be read): the tops of unreached trees first, then the rest.
        let (all, listed) = self.inos();
        if let Some(e) = &listed {
            w.rep.notes.push(format!(
                "the inode table could not all be listed ({e}): the inodes on its damaged pages were not looked for"
            ));
        }
        {
            {
                let lf = (0..100)
                    .map(|i| if i == 0 { LOST_FOUND.to_string() } else { format!("{LOST_FOUND}.{i}") })
                    .find(|n| !root_names.contains(n.as_bytes()))
                    .unwrap_or_else(|| format!("{LOST_FOUND}.recovered"));
                let mut made = false;
                for pass in 0..2 {
                    for &ino in &all {
                        if w.seen.contains(&ino) {
                            continue;
                        }
                        let data = match self.inode(ino) {
                            Ok(Some(d)) => d,
                            Ok(None) => continue,
                            Err(e) => {
                                if pass == 1 {
                                    w.seen.insert(ino);
                                    w.lost(format!("inode {ino}"), format!("its record could not be read: {e}"));
                                }
                                continue;
                            }
                        };
                        if data.nlink == 0 {
                            continue;
                        }
                        // First pass: directories whose parent was reached
                        // or is gone (the tops); second: everything left.
                        if pass == 0 {
                            let parent = data.dir().map(|d| d.parent);
                            let top =
                                parent.is_some_and(|p| w.seen.contains(&p) || !matches!(self.inode(p), Ok(Some(_))));
                            if !top {
                                continue;
                            }
                        }
                        if !made {
                            if let Err(e) = w.sink.dir(lf.as_bytes(), &lf_attr) {
                                w.lost(format!("/{lf}"), e.to_string());
                                break;
                            }
                            made = true;
                        }
                        w.seen.insert(ino);
                        w.rep.unreachable += 1;
                        let path = format!("{lf}/#{ino}").into_bytes();
                        w.tree(path, ino, data, progress);
                    }
                }
                if made {
                    if let Err(e) = w.sink.dir_done(lf.as_bytes(), &lf_attr) {
                        w.lost(format!("/{lf}"), format!("its attributes could not be set: {e}"));
                    }
                }
            }
        }
        Ok(w.rep)
    }
}

/// A directory still to finish: its path, attributes and entries left.
type Open = (Vec<u8>, Attr, std::vec::IntoIter<(Vec<u8>, Ino)>);

struct Walk<'a> {
    src: &'a Source,
    sink: &'a mut dyn Sink,
    rep: SalvageReport,
    /// Inodes handed over (directories, and files once).
    seen: HashSet<Ino>,
    /// Files with more than one link: the path they were saved at.
    links: HashMap<Ino, Vec<u8>>,
}

/// An inode's attributes as the sink gets them (`blocks` is not known
/// here: 0).
fn attr(ino: Ino, d: &InodeData) -> Attr {
    Attr {
        ino,
        size: d.size,
        blocks: 0,
        atime: d.atime,
        mtime: d.mtime,
        ctime: d.ctime,
        btime: d.btime,
        mode: d.mode,
        nlink: d.nlink,
        uid: d.uid,
        gid: d.gid,
        rdev: d.rdev,
        blksize: BLOCK_SIZE as u32,
    }
}

fn shown(path: &[u8]) -> String {
    format!("/{}", String::from_utf8_lossy(path))
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

impl Walk<'_> {
    fn lost(&mut self, what: String, why: String) {
        tracing::error!("not saved: {what}: {why}");
        self.rep.lost.push((what, why));
    }

    /// The tree at `ino` (already read as `data`), saved at `path`.
    fn tree(&mut self, path: Vec<u8>, ino: Ino, data: InodeData, progress: Progress) {
        let mut stack: Vec<Open> = Vec::new();
        if let Some(o) = self.item(path, ino, data, progress) {
            stack.push(o);
        }
        while let Some(top) = stack.last_mut() {
            let Some((name, child)) = top.2.next() else {
                let (p, a, _) = stack.pop().unwrap_or_else(|| unreachable!());
                if let Err(e) = self.sink.dir_done(&p, &a) {
                    self.lost(shown(&p), format!("its attributes could not be set: {e}"));
                }
                continue;
            };
            let path = join(&top.0, &name);
            let data = match self.src.inode(child) {
                Ok(Some(d)) => d,
                Ok(None) => {
                    self.lost(shown(&path), format!("its entry names inode {child}, which does not exist"));
                    continue;
                }
                Err(e) => {
                    self.lost(shown(&path), format!("inode {child} could not be read: {e}"));
                    continue;
                }
            };
            let first = self.seen.insert(child);
            if data.kind() == S_IFDIR && !first {
                self.lost(shown(&path), format!("directory inode {child} is named twice: saved once"));
                continue;
            }
            if let Some(o) = self.item(path, child, data, progress) {
                stack.push(o);
            }
        }
    }

    /// Hands one item to the sink; a directory comes back to be walked.
    fn item(&mut self, path: Vec<u8>, ino: Ino, data: InodeData, progress: Progress) -> Option<Open> {
        let attr = attr(ino, &data);
        let r = match (&data.body, data.kind()) {
            (Body::Dir(d), _) => {
                if let Err(e) = self.sink.dir(&path, &attr) {
                    self.lost(shown(&path), format!("the directory could not be made: {e}"));
                    return None;
                }
                self.rep.dirs += 1;
                let (entries, err) = self.src.entries(d);
                if let Some(e) = err {
                    self.lost(shown(&path), e);
                }
                progress(&self.rep, &path);
                return Some((path, attr, entries.into_iter()));
            }
            (Body::File(_), S_IFREG) => {
                if data.nlink > 1 {
                    if let Some(first) = self.links.get(&ino).cloned() {
                        let r = self.sink.hard_link(&path, &first);
                        if r.is_ok() {
                            self.rep.links += 1;
                        }
                        progress(&self.rep, &path);
                        return r.err().and_then(|e| {
                            self.lost(shown(&path), format!("the link could not be made: {e}"));
                            None
                        });
                    }
                    self.links.insert(ino, path.clone());
                }
                self.file(&path, ino, &data, &attr)
            }
            (Body::Symlink(t), S_IFLNK) => self.sink.symlink(&path, t, &attr).map(|()| self.rep.symlinks += 1),
            _ => self.sink.special(&path, &attr).map(|()| self.rep.specials += 1),
        };
        if let Err(e) = r {
            self.lost(shown(&path), format!("could not be written: {e}"));
        }
        progress(&self.rep, &path);
        None
    }

    /// A regular file: every block that reads, the others left as holes.
    fn file(&mut self, path: &[u8], ino: Ino, data: &InodeData, attr: &Attr) -> std::io::Result<()> {
        self.sink.file(path, attr)?;
        self.rep.files += 1;
        let lay = match data.layout() {
            Ok(Some(l)) => Some(l.clone()),
            Ok(None) => None,
            Err(e) => {
                self.lost(shown(path), format!("its layout could not be read ({e}): no data saved"));
                return self.sink.file_done(attr);
            }
        };
        let size = data.size;
        let mut bad: Vec<(u64, u64)> = Vec::new();
        if let Some(lay) = lay {
            let io = IoCtx {
                owner: ino,
                origin: crate::blocks::Origin::NONE,
                storage: self.src.storage(),
                epoch: 0,
                sink: &crate::blocks::ignore_records,
                repair: false,
            };
            let blocks = size.div_ceil(BS);
            let mut buf = vec![0u8; (CHUNK_BLOCKS * BS) as usize];
            let mut b = 0;
            while b < blocks {
                let n = CHUNK_BLOCKS.min(blocks - b);
                let chunk = &mut buf[..(n * BS) as usize];
                if lay.root().read(&io, b, chunk).is_ok() {
                    self.put(b, chunk, size)?;
                } else {
                    for i in 0..n {
                        let one = &mut chunk[(i * BS) as usize..((i + 1) * BS) as usize];
                        match lay.root().read(&io, b + i, one) {
                            Ok(()) => self.put(b + i, one, size)?,
                            Err(e) => {
                                tracing::debug!(ino, block = b + i, error = %e, "file block unreadable");
                                match bad.last_mut() {
                                    Some(l) if l.0 + l.1 == b + i => l.1 += 1,
                                    _ => bad.push((b + i, 1)),
                                }
                            }
                        }
                    }
                }
                b += n;
            }
        }
        if !bad.is_empty() {
            let ranges: Vec<String> =
                bad.iter().map(|&(f, l)| format!("bytes {}..{}", f * BS, ((f + l) * BS).min(size))).collect();
            self.lost(shown(path), format!("saved in part: {} could not be read (left as holes)", ranges.join(", ")));
        }
        self.sink.file_done(attr)
    }

    fn put(&mut self, fblk: u64, block: &[u8], size: u64) -> std::io::Result<()> {
        let off = fblk * BS;
        let n = (size - off).min(block.len() as u64) as usize;
        self.rep.bytes += n as u64;
        self.sink.data(off, &block[..n])
    }
}
