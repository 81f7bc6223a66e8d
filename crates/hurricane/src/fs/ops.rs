//! Inode-level namespace operations: each validates under the locks of the
//! inodes it touches, applies its ops to the state and logs them as one
//! atomic group, all inside the journal gate.

use super::{ignore, now, Fs};
use crate::blocks::{IoCtx, Layout, NodeRecord};
use crate::codec::Encoder;
use crate::error::{Error, Result};
use crate::journal::{Entered, Ino, NewInode, Op};
use crate::layout;
use crate::namespace::acl::{self, Acl};
use crate::namespace::flags;
use crate::namespace::inode::{S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use crate::namespace::perm::{R, W, X};
use crate::namespace::{Body, Creds, InodeData, Locked, ROOT};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;

pub const NAME_MAX: usize = 255;
pub const LINK_MAX: u32 = 65000;
pub const XATTR_NAME_MAX: usize = 255;
pub const XATTR_SIZE_MAX: usize = 65536;
/// All extended attributes of one inode together.
pub const XATTR_TOTAL_MAX: usize = 1 << 20;
pub const SYMLINK_MAX: usize = 4095;

/// Open flag of an execve open (the kernel's `__FMODE_EXEC`, which FUSE
/// passes on): it needs execute permission rather than read.
pub const O_EXEC_OPEN: i32 = 0x20;

/// Permission bits an open with these flags needs (O_TRUNC needs write).
pub fn open_mask(flags: i32) -> u32 {
    let m = match flags & libc::O_ACCMODE {
        libc::O_WRONLY => W,
        libc::O_RDWR => R | W,
        _ => R,
    };
    if flags & libc::O_TRUNC != 0 {
        m | W
    } else {
        m
    }
}

pub use crate::xattr::{DIR_LAYOUT as DIR_LAYOUT_XATTR, LAYOUT as LAYOUT_XATTR, MIGRATION as MIGRATION_XATTR};

/// Permission bits of `mode` once a change by an unprivileged caller (a
/// write, a truncate, a chown) has dropped privilege: set-user-id always,
/// set-group-id of a group-executable file (a set-group-id file without
/// group execute marks mandatory locking, not privilege).
pub(crate) fn without_setid(mode: u32) -> u32 {
    let m = mode & 0o7777 & !libc::S_ISUID;
    if mode & 0o010 != 0 {
        m & !libc::S_ISGID
    } else {
        m
    }
}

/// File attributes, as `stat` reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    pub size: u64,
    /// 512-byte units allocated.
    pub blocks: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub btime: i64,
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
}

impl Attr {
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }
    pub fn is_file(&self) -> bool {
        self.mode & S_IFMT == S_IFREG
    }
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
    }
}

/// Changes for `setattr`; None leaves a field alone.
#[derive(Debug, Clone, Default)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    /// Some(None) = now.
    pub atime: Option<Option<i64>>,
    pub mtime: Option<Option<i64>>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RenameFlags {
    pub noreplace: bool,
    pub exchange: bool,
    /// Leaves a whiteout (a character device 0:0, as overlay file systems
    /// mark a name deleted) in the source's place, in the same atomic group
    /// as the move.
    pub whiteout: bool,
}

#[derive(Debug, Clone)]
pub struct DirItem {
    pub name: Vec<u8>,
    pub ino: Ino,
    pub kind: u32,
    /// Offset to pass back to continue after this entry.
    pub next: u64,
}

#[derive(Debug, Clone, Copy)]
/// Space and inodes, as statfs(2) reports them. `bfree` counts only the
/// devices new data may be placed on (online or resilvering).
pub struct StatFs {
    pub blocks: u64,
    /// Free blocks, those of deletions the next commit returns included.
    pub bfree: u64,
    /// What a new file of the pool's default layout can take (statfs's
    /// `f_bavail`): the meta-data's reserve left out, and the layout's own
    /// cost counted (copies, parity, a stripe's fullest device).
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
}

impl Attr {
    /// The inode's generation, as file handles carry it beside the inode
    /// number: derived from the birth time, which is set once when the
    /// inode is made and kept in its record. Inode numbers are never given
    /// twice in a pool's committed history, but a number handed out after
    /// the last commit is given again after a crash (the file it named was
    /// never durable); the new file's birth time differs, so a handle of
    /// the lost file no longer reaches the new one. The kernel keeps 32
    /// bits of it; the root's is 0, the generation the kernel gives the
    /// root of a FUSE mount.
    pub fn generation(&self) -> u64 {
        if self.ino == ROOT {
            return 0;
        }
        // splitmix64's finaliser: nearby times give unrelated values.
        let mut x = self.btime as u64;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        (x ^ (x >> 32)) & 0xffff_ffff
    }
}

pub(crate) fn attr_of(ino: Ino, d: &InodeData) -> Attr {
    let blocks = match &d.body {
        // Advisory: a tree that cannot be read back shows as 0 blocks here,
        // and is an error on the I/O that needs it.
        Body::File(l) => l.sectors(d.size).unwrap_or_else(|e| {
            tracing::warn!("inode {ino}: {e}");
            0
        }),
        Body::Dir(_) => 8,
        _ => 0,
    };
    Attr {
        ino,
        size: d.size,
        blocks,
        atime: d.atime,
        mtime: d.mtime,
        ctime: d.ctime,
        btime: d.btime,
        mode: d.mode,
        nlink: d.nlink,
        uid: d.uid,
        gid: d.gid,
        rdev: d.rdev,
        blksize: crate::device::BLOCK_SIZE as u32,
    }
}

/// setxattr(2)'s `XATTR_CREATE` (the name must be new) and `XATTR_REPLACE`
/// (it must exist), for a name that `exists` or not.
fn check_xattr_flags(flags: i32, exists: bool, name: &[u8]) -> Result<()> {
    if flags & libc::XATTR_CREATE != 0 && exists {
        return Err(Error::Exists(show(name)));
    }
    if flags & libc::XATTR_REPLACE != 0 && !exists {
        return Err(Error::NoAttr(show(name)));
    }
    Ok(())
}

/// A name `d` does not hold, for an unnamed file's moment in it (inside
/// one atomic group, under the directory's lock: nothing else sees it).
fn unused_name(d: &crate::namespace::inode::Dir) -> Result<Vec<u8>> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    loop {
        let n = format!(".hurricane-unnamed-{}", NEXT.fetch_add(1, Ordering::Relaxed)).into_bytes();
        if d.get(&n)?.is_none() {
            return Ok(n);
        }
    }
}

pub(crate) fn check_name(name: &[u8]) -> Result<()> {
    let shown = || String::from_utf8_lossy(name).into_owned();
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Error::Invalid(format!("name {:?}", shown())));
    }
    if name.len() > NAME_MAX {
        return Err(Error::NameTooLong(format!("{}...", String::from_utf8_lossy(&name[..32]))));
    }
    Ok(())
}

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// Resolving a layout spec (parse, pick devices, validate, build, encode)
/// took half of a file creation's time. The result depends only on the
/// pool, the spec, the devices' order by free space (with which are
/// full: see `layout::spec::pick`) and the device a `colocate` file's
/// directory prefers, so each thread keeps its latest few.
#[derive(PartialEq, Eq)]
struct ResolvedKey {
    pool: u64,
    order: Vec<u32>,
    prefer: Option<u32>,
    spec: String,
}

const RESOLVED_KEEP: usize = 8;

thread_local! {
    static RESOLVED: std::cell::RefCell<Vec<(ResolvedKey, Vec<u8>)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Devices as the resolver ranks them: full ones last, then by free space
/// (most first), then by index. A full device's index is offset past the
/// others' so that which devices are full is part of the order too.
fn device_order(info: &layout::PoolInfo) -> Vec<u32> {
    let free = |d: u32| info.free_blocks.get(d as usize).copied().unwrap_or(0);
    let mut order: Vec<u32> = (0..info.devices).collect();
    order.sort_by_key(|&d| (free(d) == 0, std::cmp::Reverse(free(d)), d));
    let n = info.devices;
    // Retired devices (never picked) are offset further, so that which
    // devices are retired is part of the order as well.
    let key = |d: u32| match (info.retired(d).is_some(), free(d) == 0) {
        (true, _) => d.saturating_add(n.saturating_mul(2)),
        (false, true) => d.saturating_add(n),
        (false, false) => d,
    };
    order.iter().map(|&d| key(d)).collect()
}

impl Fs {
    pub fn getattr(&self, ino: Ino) -> Result<Attr> {
        let n = self.state().inode(ino)?;
        let d = n.data.read();
        Ok(attr_of(ino, &d))
    }

    pub fn lookup(&self, cred: &Creds, parent: Ino, name: &[u8]) -> Result<Attr> {
        let p = self.state().inode(parent)?;
        let child = {
            let d = p.data.read();
            let dir = d.dir().ok_or_else(|| Error::NotDir(format!("inode {parent}")))?;
            if !cred.allowed(&d, X) {
                return Err(Error::Access(show(name)));
            }
            if name == b"." {
                parent
            } else if name == b".." {
                dir.parent
            } else {
                if name.len() > NAME_MAX {
                    return Err(Error::NameTooLong(show(&name[..32])));
                }
                dir.get(name)?.ok_or_else(|| Error::NotFound(show(name)))?.ino
            }
        };
        let a = self.getattr(child)?;
        if name != b"." && name != b".." {
            self.note_parent(child, parent);
        }
        Ok(a)
    }

    pub fn access(&self, cred: &Creds, ino: Ino, mask: u32) -> Result<()> {
        let n = self.state().inode(ino)?;
        let d = n.data.read();
        if mask != 0 && !cred.allowed(&d, mask & 7) {
            return Err(Error::Access(format!("inode {ino}")));
        }
        Ok(())
    }

    pub fn readlink(&self, ino: Ino) -> Result<Vec<u8>> {
        let n = self.state().inode(ino)?;
        let d = n.data.read();
        match &d.body {
            Body::Symlink(t) => Ok(t.clone()),
            _ => Err(Error::Invalid(format!("inode {ino} is not a symbolic link"))),
        }
    }

    /// Where a listing of directory `ino` begun now ends (opendir(3) and
    /// rewinddir(3) take it): the offset every entry made after this,
    /// new or renamed or linked in, is listed at or past. A listing read
    /// a page at a time with [`Fs::readdir_to`] up to it ends however
    /// fast names come and go.
    pub fn readdir_end(&self, ino: Ino) -> Result<u64> {
        let n = self.state().inode(ino)?;
        let d = n.data.read();
        let dir = d.dir().ok_or_else(|| Error::NotDir(format!("inode {ino}")))?;
        Ok(dir.next_cookie)
    }

    /// Entries of a directory from `offset` (0 = start; "." and ".." come
    /// first). `f` returns false to stop (buffer full). A listing in one
    /// call sees the directory at one moment; one read a page at a time
    /// while the directory changes should stop at [`Fs::readdir_end`]
    /// ([`Fs::readdir_to`]).
    pub fn readdir(&self, cred: &Creds, ino: Ino, offset: u64, f: impl FnMut(DirItem) -> bool) -> Result<()> {
        self.readdir_to(cred, ino, offset, u64::MAX, f)
    }

    /// [`Fs::readdir`] of the entries listed before `end` (what
    /// [`Fs::readdir_end`] gave when the listing began). An entry's offset
    /// is its own, kept while it exists: a name replaced by a rename over
    /// it, or renamed within the directory, keeps its place, so an entry
    /// there from a listing's start to its end is listed exactly once, and
    /// an offset taken from a listing (telldir) resumes it after any
    /// change.
    pub fn readdir_to(
        &self,
        cred: &Creds,
        ino: Ino,
        offset: u64,
        end: u64,
        mut f: impl FnMut(DirItem) -> bool,
    ) -> Result<()> {
        let n = self.state().inode(ino)?;
        let d = n.data.read();
        let dir = d.dir().ok_or_else(|| Error::NotDir(format!("inode {ino}")))?;
        if !cred.allowed(&d, R) {
            return Err(Error::Access(format!("inode {ino}")));
        }
        if offset < 1 && !f(DirItem { name: b".".to_vec(), ino, kind: S_IFDIR, next: 1 }) {
            return Ok(());
        }
        if offset < 2 && !f(DirItem { name: b"..".to_vec(), ino: dir.parent, kind: S_IFDIR, next: 2 }) {
            return Ok(());
        }
        let from = offset.max(2) + 1;
        dir.for_each_from(from, &mut |cookie, name, e| {
            cookie < end && f(DirItem { name: name.to_vec(), ino: e.ino, kind: e.kind, next: cookie })
        })
    }

    pub fn statfs(&self) -> StatFs {
        let s = self.storage();
        // A removed device is no longer part of the pool's size.
        let blocks = s
            .allocs
            .iter()
            .zip(&s.devs)
            .filter(|(_, d)| d.state() != crate::device::DeviceState::Removed)
            .map(|(a, _)| a.total_blocks())
            .sum();
        // Only devices new data may go to have free space to offer: a
        // missing, faulted, removed or evacuating device's free blocks
        // cannot be used. Blocks of deleted files are free once the next
        // commit is durable, and a request short of space commits first
        // (`with_room`): they count as free now.
        let placeable = || s.allocs.iter().zip(&s.devs).filter(|(_, d)| d.state().placeable()).map(|(a, _)| a);
        let bfree = placeable().map(|a| a.free_blocks().saturating_add(a.pending_frees())).sum();
        let for_data: Vec<u64> = s
            .allocs
            .iter()
            .zip(&s.devs)
            .map(|(a, d)| if d.state().placeable() { a.free_for_data().saturating_add(a.pending_frees()) } else { 0 })
            .collect();
        // A layout that no longer resolves (every device full) has no room.
        let bavail = self
            .file_spec_in(&self.default_layout(), &self.pool_info())
            .map_or(0, |spec| layout::room(&spec, &for_data))
            .min(bfree);
        let files = self.state().count() as u64;
        StatFs {
            blocks,
            bfree,
            bavail,
            files,
            ffree: u32::MAX as u64 - files.min(u32::MAX as u64),
            bsize: 4096,
            namelen: NAME_MAX as u32,
        }
    }

    /// The layout a new file in `parent` gets: explicit, else the nearest
    /// directory default, else the pool default.
    pub(crate) fn new_file_layout(&self, parent: Ino, explicit: Option<&str>) -> Result<Vec<u8>> {
        let spec_text = match explicit {
            Some(s) => s.to_string(),
            None => {
                let p = self.state().inode(parent)?;
                let d = p.data.read();
                match d.dir().map(|d| d.layout.clone()).filter(|l| !l.is_empty()) {
                    Some(l) => l,
                    None => self.default_layout().to_string(),
                }
            }
        };
        let mut info = self.pool_info();
        // Small files of a directory share groups only on one device: the
        // directory picks it (by its inode number, among those with room).
        if spec_text.contains(crate::blocks::colocate::TYPE.name) {
            let usable: Vec<u32> = (0..info.devices)
                .filter(|&d| info.retired(d).is_none() && info.free_blocks.get(d as usize) > Some(&0))
                .collect();
            if !usable.is_empty() {
                info.prefer = Some(usable[(parent % usable.len() as u64) as usize]);
            }
        }
        let key =
            ResolvedKey { pool: self.inner.salt, order: device_order(&info), prefer: info.prefer, spec: spec_text };
        if let Some(hit) = RESOLVED.with(|c| c.borrow().iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone())) {
            return Ok(hit);
        }
        let l = Layout::build(&self.file_spec_in(&key.spec, &info)?)?;
        self.note_layout(&l);
        let mut e = Encoder::new();
        l.encode(&mut e);
        let encoded = e.into_inner();
        RESOLVED.with(|c| {
            let mut c = c.borrow_mut();
            c.truncate(RESOLVED_KEEP - 1);
            c.insert(0, (key, encoded.clone()));
        });
        Ok(encoded)
    }

    /// Creates a node (file, directory, symlink, device, FIFO, socket) and
    /// links it into `parent` as one atomic group. The mode is taken as
    /// given (no umask), masked by the directory's default ACL if it has
    /// one, which the node inherits (see [`Fs::mknod_umask`]).
    #[allow(clippy::too_many_arguments)]
    pub fn mknod(
        &self,
        cred: &Creds,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u32,
        target: Option<&[u8]>,
        layout: Option<&str>,
    ) -> Result<Attr> {
        self.mknod_umask(cred, parent, name, mode, 0, rdev, target, layout)
    }

    /// [`Fs::mknod`] for a caller with a umask: as Linux does, the umask
    /// applies only where the directory has no default ACL; where it has
    /// one, the new node's access ACL is that default ACL masked by the
    /// mode (a directory also inherits it as its own default ACL).
    #[allow(clippy::too_many_arguments)]
    pub fn mknod_umask(
        &self,
        cred: &Creds,
        parent: Ino,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u32,
        target: Option<&[u8]>,
        layout: Option<&str>,
    ) -> Result<Attr> {
        check_name(name)?;
        self.make_node(cred, parent, Some(name), mode, umask, rdev, target, layout)
    }

    /// Creates an unnamed regular file in `dir` (`open(2)` with
    /// `O_TMPFILE`), counted open once: the caller's handle, whose
    /// `release_inode` frees it unless [`Fs::link_unnamed`] gave it a name
    /// first. It is made, given a placeholder name and unlinked in one
    /// atomic group, so the journal and checkpoints know it as an orphan
    /// (an unlinked open file): the next open frees it if the process
    /// holding it dies.
    pub fn tmpfile(&self, cred: &Creds, dir: Ino, mode: u32, umask: u32, layout: Option<&str>) -> Result<Attr> {
        self.make_node(cred, dir, None, S_IFREG | (mode & 0o7777), umask, 0, None, layout)
    }

    #[allow(clippy::too_many_arguments)]
    fn make_node(
        &self,
        cred: &Creds,
        parent: Ino,
        name: Option<&[u8]>,
        mode: u32,
        umask: u32,
        rdev: u32,
        target: Option<&[u8]>,
        layout: Option<&str>,
    ) -> Result<Attr> {
        self.check_writable()?;
        let kind = mode & S_IFMT;
        let kind = if kind == 0 { S_IFREG } else { kind };
        if let Some(t) = target {
            if t.is_empty() || t.len() > SYMLINK_MAX {
                return Err(Error::NameTooLong(format!("symlink target of {} bytes", t.len())));
            }
        }
        let lay = if kind == S_IFREG { self.new_file_layout(parent, layout)? } else { Vec::new() };
        self.throttle()?;
        let g = self.inner.gate.enter();
        let mut l = self.state().lock(&[parent]);
        let (gid, mode, dir_layout, unnamed, name, acls) = {
            let p = l.get(parent)?;
            let d = p.dir().ok_or_else(|| Error::NotDir(format!("inode {parent}")))?;
            if p.nlink == 0 {
                return Err(Error::NotFound("directory was removed".into()));
            }
            let unnamed = name.is_none();
            let name = match name {
                Some(n) => n.to_vec(),
                None => unused_name(d)?,
            };
            if !cred.allowed(p, W | X) {
                return Err(Error::Access(show(&name)));
            }
            flags::check_write(p, parent, "creation in directory")?;
            if d.get(&name)?.is_some() {
                return Err(Error::Exists(show(&name)));
            }
            if kind == S_IFDIR && p.nlink >= LINK_MAX {
                return Err(Error::TooManyLinks(format!("inode {parent}")));
            }
            let mut perm = mode & 0o7777;
            // setgid directories pass their group down, and their setgid bit to subdirectories.
            let gid = if p.mode & libc::S_ISGID != 0 {
                if kind == S_IFDIR {
                    perm |= libc::S_ISGID;
                }
                p.gid
            } else {
                cred.gid
            };
            if kind != S_IFDIR && perm & libc::S_ISGID != 0 && !cred.is_root() && !cred.in_group(gid) {
                perm &= !libc::S_ISGID;
            }
            let (mode, acls) = inherit_acl(p, kind, kind | perm, umask)?;
            (gid, mode, d.layout.clone(), unnamed, name, acls)
        };
        // Found absent above, and the directory stays locked until the
        // link below is applied.
        if let Some(d) = l.get(parent)?.dir_mut() {
            d.note_absent(&name);
        }
        let ino = self.state().alloc_ino();
        let t = now();
        let create = Op::Create(NewInode {
            ino,
            mode,
            uid: cred.uid,
            gid,
            rdev,
            time: t,
            layout: lay,
            target: target.map(|t| t.to_vec()).unwrap_or_default(),
            parent,
        });
        let link = Op::Link { dir: parent, name: name.clone(), ino, time: t };
        let mut ops = vec![create, link];
        for (acl_name, value) in acls {
            ops.push(Op::SetXattr { ino, name: acl_name.as_bytes().to_vec(), value, time: t });
        }
        if unnamed {
            // Opened before the directory's lock is let go: nothing can
            // free it between its unlinking and the caller's handle.
            ops.push(Op::Unlink { dir: parent, name, time: t });
        }
        // New directories inherit their parent's default layout.
        if kind == S_IFDIR && !dir_layout.is_empty() {
            ops.push(Op::SetDirLayout { ino, spec: dir_layout });
        }
        self.state().apply(&ops[0], &mut l)?;
        let mut l2 = self.state().lock(&[ino]);
        l.absorb(&mut l2);
        for op in &ops[1..] {
            self.state().apply(op, &mut l)?;
        }
        if unnamed {
            self.state().inode(ino)?.opens.fetch_add(1, Ordering::AcqRel);
        }
        self.log(&g, &ops);
        let a = attr_of(ino, l.get(ino)?);
        drop(l);
        self.note_parent(ino, parent);
        Ok(a)
    }

    pub fn mkdir(&self, cred: &Creds, parent: Ino, name: &[u8], mode: u32) -> Result<Attr> {
        self.mknod(cred, parent, name, S_IFDIR | (mode & 0o7777), 0, None, None)
    }

    pub fn symlink(&self, cred: &Creds, parent: Ino, name: &[u8], target: &[u8]) -> Result<Attr> {
        self.mknod(cred, parent, name, S_IFLNK | 0o777, 0, Some(target), None)
    }

    /// Locks a directory and the inode one of its entries names, retrying
    /// if the entry changes between the lookup and the locking.
    fn lock_entry(&self, dir: Ino, name: &[u8], extra: &[Ino]) -> Result<(Locked, Ino)> {
        loop {
            let child = {
                let p = self.state().inode(dir)?;
                let d = p.data.read();
                let dd = d.dir().ok_or_else(|| Error::NotDir(format!("inode {dir}")))?;
                dd.get(name)?.ok_or_else(|| Error::NotFound(show(name)))?.ino
            };
            let mut inos = vec![dir, child];
            inos.extend_from_slice(extra);
            let mut l = self.state().lock(&inos);
            let now_child = l.get(dir)?.dir().map(|d| d.get(name)).transpose()?.flatten().map(|e| e.ino);
            if now_child == Some(child) {
                return Ok((l, child));
            }
        }
    }

    pub fn unlink(&self, cred: &Creds, parent: Ino, name: &[u8]) -> Result<()> {
        self.remove_entry(cred, parent, name, false)
    }

    pub fn rmdir(&self, cred: &Creds, parent: Ino, name: &[u8]) -> Result<()> {
        if name == b"." {
            return Err(Error::Invalid("rmdir of \".\"".into()));
        }
        if name == b".." {
            return Err(Error::NotEmpty("..".into()));
        }
        self.remove_entry(cred, parent, name, true)
    }

    fn remove_entry(&self, cred: &Creds, parent: Ino, name: &[u8], dir: bool) -> Result<()> {
        self.check_writable()?;
        self.throttle()?;
        if name.len() > NAME_MAX {
            return Err(Error::NameTooLong(show(&name[..32])));
        }
        let g = self.inner.gate.enter();
        let (mut l, child) = self.lock_entry(parent, name, &[])?;
        {
            let c = l.get(child)?.clone_meta();
            let cflags = flags::of(l.get(child)?);
            let p = l.get(parent)?;
            if !cred.allowed(p, W | X) {
                return Err(Error::Access(show(name)));
            }
            // A sticky directory refuses with EPERM, as Linux does.
            if !cred.may_delete(p, &c) {
                return Err(Error::Perm(show(name)));
            }
            flags::check_delete(p, parent, cflags, child)?;
            match (dir, c.is_dir()) {
                (true, false) => return Err(Error::NotDir(show(name))),
                (false, true) => return Err(Error::IsDir(show(name))),
                _ => {}
            }
        }
        if dir && l.get(child)?.dir().is_some_and(|d| !d.is_empty()) {
            return Err(Error::NotEmpty(show(name)));
        }
        let op = Op::Unlink { dir: parent, name: name.to_vec(), time: now() };
        self.state().apply(&op, &mut l)?;
        let mut ops = vec![op];
        self.reap(&g, &mut l, child, &mut ops)?;
        self.log(&g, &ops);
        Ok(())
    }

    /// If `ino` has no links and no open handles, frees its space and the
    /// inode, adding the ops to `ops`.
    fn reap(&self, g: &Entered, l: &mut Locked, ino: Ino, ops: &mut Vec<Op>) -> Result<()> {
        let node = self.state().inode(ino)?;
        if l.get(ino)?.nlink > 0 || node.opens.load(Ordering::Acquire) > 0 {
            return Ok(());
        }
        let holds_space = match &l.get(ino)?.body {
            Body::File(f) => f.holds_space()?,
            _ => false,
        };
        let lay = if holds_space { l.get(ino)?.layout()?.cloned() } else { None };
        if let Some(lay) = lay {
            let changes = Mutex::new(Vec::new());
            let sink = |c: NodeRecord| changes.lock().push(c);
            let io = IoCtx {
                owner: ino,
                origin: crate::blocks::Origin::NONE, // frees only; the inode is locked
                storage: self.storage(),
                epoch: g.epoch(),
                sink: &sink,
                repair: true,
            };
            lay.root().truncate(&io, 0)?;
        }
        self.end_migration(ino, || Error::NotFound(format!("inode {ino} was deleted during its migration")));
        let op = Op::Free { ino };
        self.state().apply(&op, l)?;
        self.inner.errors.forget(ino);
        // Its number may be given to a new file, which must not inherit
        // an unreported write error.
        self.inner.write_errors.forget(ino);
        ops.push(op);
        Ok(())
    }

    /// Frees an inode with no links (orphans found at open, last close of
    /// an unlinked file).
    pub(crate) fn free_inode(&self, ino: Ino) -> Result<()> {
        let g = self.inner.gate.enter();
        let mut l = self.state().lock(&[ino]);
        let mut ops = Vec::new();
        self.reap(&g, &mut l, ino, &mut ops)?;
        self.log(&g, &ops);
        Ok(())
    }

    pub fn link(&self, cred: &Creds, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        self.link_as(cred, ino, newparent, newname, false)
    }

    /// A link that may also name a file with no links that is open (an
    /// unnamed file from [`Fs::tmpfile`]; the kernel lets `linkat` name
    /// only those, once, and none opened with O_EXCL). The file stops being
    /// an orphan.
    pub fn link_unnamed(&self, cred: &Creds, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        self.link_as(cred, ino, newparent, newname, true)
    }

    fn link_as(&self, cred: &Creds, ino: Ino, newparent: Ino, newname: &[u8], unnamed: bool) -> Result<Attr> {
        self.check_writable()?;
        self.throttle()?;
        check_name(newname)?;
        let g = self.inner.gate.enter();
        let mut l = self.state().lock(&[ino, newparent]);
        {
            // Where the link would go first, then what is linked (Linux
            // answers EEXIST for a directory linked over a name).
            let p = l.get(newparent)?;
            let d = p.dir().ok_or_else(|| Error::NotDir(format!("inode {newparent}")))?;
            if !cred.allowed(p, W | X) {
                return Err(Error::Access(show(newname)));
            }
            flags::check_write(p, newparent, "link into directory")?;
            if d.get(newname)?.is_some() {
                return Err(Error::Exists(show(newname)));
            }
            let c = l.get(ino)?;
            flags::check_change(c, ino, "link")?;
            if c.is_dir() {
                return Err(Error::Perm("hard link to a directory".into()));
            }
            let open = || self.state().get(ino).is_some_and(|n| n.opens.load(Ordering::Acquire) > 0);
            if c.nlink == 0 && !(unnamed && c.is_file() && open()) {
                return Err(Error::NotFound(format!("inode {ino} was removed")));
            }
            if c.nlink >= LINK_MAX {
                return Err(Error::TooManyLinks(show(newname)));
            }
        }
        let op = Op::Link { dir: newparent, name: newname.to_vec(), ino, time: now() };
        self.state().apply(&op, &mut l)?;
        self.log(&g, &[op]);
        let a = attr_of(ino, l.get(ino)?);
        drop(l);
        self.note_parent(ino, newparent);
        Ok(a)
    }

    /// Whether `dir` is `anc` or lies beneath it.
    fn is_under(&self, mut dir: Ino, anc: Ino) -> Result<bool> {
        for _ in 0..100_000 {
            if dir == anc {
                return Ok(true);
            }
            if dir == ROOT {
                return Ok(false);
            }
            let n = self.state().inode(dir)?;
            dir = n.data.read().dir().map(|d| d.parent).unwrap_or(ROOT);
        }
        Err(Error::corrupt("namespace", "directory parent chain does not reach the root"))
    }

    pub fn rename(
        &self,
        cred: &Creds,
        sdir: Ino,
        sname: &[u8],
        ddir: Ino,
        dname: &[u8],
        flags: RenameFlags,
    ) -> Result<()> {
        self.check_writable()?;
        self.throttle()?;
        if sname == b"." || sname == b".." || dname == b"." || dname == b".." {
            return Err(Error::Invalid("rename of \".\" or \"..\"".into()));
        }
        check_name(dname)?;
        if sname.len() > NAME_MAX {
            return Err(Error::NameTooLong(show(&sname[..32])));
        }
        if flags.exchange && (flags.noreplace || flags.whiteout) {
            return Err(Error::Invalid("RENAME_EXCHANGE with RENAME_NOREPLACE or RENAME_WHITEOUT".into()));
        }
        // Moves of directories between parents are serialised and checked
        // for loops before any inode lock is taken.
        let _rl = (sdir != ddir).then(|| self.inner.rename_lock.lock());
        let g = self.inner.gate.enter();
        loop {
            let entry = |d: Ino, n: &[u8]| -> Result<Option<(Ino, u32)>> {
                let p = self.state().inode(d)?;
                let x = p.data.read();
                let dd = x.dir().ok_or_else(|| Error::NotDir(format!("inode {d}")))?;
                Ok(dd.get(n)?.map(|e| (e.ino, e.kind)))
            };
            let (src, skind) = entry(sdir, sname)?.ok_or_else(|| Error::NotFound(show(sname)))?;
            let dst = entry(ddir, dname)?;
            // Linux's order: a name that must not exist, or must, before
            // a move beneath itself (rename(2), renameat2(2)).
            match dst {
                Some(_) if flags.noreplace => return Err(Error::Exists(show(dname))),
                None if flags.exchange => return Err(Error::NotFound(show(dname))),
                _ => {}
            }
            if sdir != ddir {
                if skind == S_IFDIR && self.is_under(ddir, src)? {
                    return Err(Error::Invalid(format!("cannot move {} beneath itself", show(sname))));
                }
                if flags.exchange {
                    if let Some((d, S_IFDIR)) = dst {
                        if self.is_under(sdir, d)? {
                            return Err(Error::Invalid(format!("cannot move {} beneath itself", show(dname))));
                        }
                    }
                }
            }
            let mut inos = vec![sdir, ddir, src];
            if let Some((d, _)) = dst {
                inos.push(d);
            }
            let mut l = self.state().lock(&inos);
            // Re-check the entries under the locks.
            let s_now = l.get(sdir)?.dir().map(|d| d.get(sname)).transpose()?.flatten().map(|e| e.ino);
            let d_now = l.get(ddir)?.dir().map(|d| d.get(dname)).transpose()?.flatten().map(|e| e.ino);
            if s_now != Some(src) || d_now != dst.map(|d| d.0) {
                continue;
            }
            let sdata = l.get(src)?.clone_meta();
            let sflags = flags::of(l.get(src)?);
            for (d, victim) in [(sdir, Some(&sdata)), (ddir, None)] {
                let p = l.get(d)?;
                if !cred.allowed(p, W | X) {
                    return Err(Error::Access(show(if d == sdir { sname } else { dname })));
                }
                if let Some(v) = victim {
                    if !cred.may_delete(p, v) {
                        return Err(Error::Perm(show(sname)));
                    }
                    flags::check_delete(p, sdir, sflags, src)?;
                } else {
                    flags::check_write(p, ddir, "rename into directory")?;
                }
            }
            if let Some((d, dkind)) = dst {
                // (A target with NOREPLACE was refused above, before the
                // locks; the entries are the same under them.)
                if d == src {
                    return Ok(());
                }
                let ddata = l.get(d)?.clone_meta();
                if !cred.may_delete(l.get(ddir)?, &ddata) {
                    return Err(Error::Perm(show(dname)));
                }
                let dflags = flags::of(l.get(d)?);
                flags::check_delete(l.get(ddir)?, ddir, dflags, d)?;
                if !flags.exchange {
                    match (skind == S_IFDIR, dkind == S_IFDIR) {
                        (true, false) => return Err(Error::NotDir(show(dname))),
                        (false, true) => return Err(Error::IsDir(show(dname))),
                        (true, true) if l.get(d)?.dir().is_some_and(|x| !x.is_empty()) => {
                            return Err(Error::NotEmpty(show(dname)));
                        }
                        _ => {}
                    }
                } else if dkind == S_IFDIR && sdir != ddir && !cred.allowed(&ddata, W) {
                    return Err(Error::Access(show(dname)));
                }
            }
            // A directory changing parents rewrites its "..": needs write on it.
            if skind == S_IFDIR && sdir != ddir && !cred.allowed(&sdata, W) {
                return Err(Error::Access(show(sname)));
            }
            let op = Op::Rename {
                sdir,
                sname: sname.to_vec(),
                ddir,
                dname: dname.to_vec(),
                exchange: flags.exchange,
                time: now(),
            };
            self.state().apply(&op, &mut l)?;
            let mut ops = vec![op];
            if let (Some((d, _)), false) = (dst, flags.exchange) {
                self.reap(&g, &mut l, d, &mut ops)?;
            }
            if flags.whiteout {
                self.whiteout(cred, &mut l, sdir, sname, &mut ops)?;
            }
            self.log(&g, &ops);
            drop(l);
            self.note_parent(src, ddir);
            if let (Some((d, _)), true) = (dst, flags.exchange) {
                self.note_parent(d, sdir);
            }
            return Ok(());
        }
    }

    /// Makes a whiteout called `name` in `dir` (locked, the name just moved
    /// away), adding the ops to `ops`: owned by the caller, mode 0, as
    /// Linux file systems make them.
    fn whiteout(&self, cred: &Creds, l: &mut Locked, dir: Ino, name: &[u8], ops: &mut Vec<Op>) -> Result<()> {
        let ino = self.state().alloc_ino();
        let time = now();
        let p = l.get(dir)?;
        let gid = if p.mode & libc::S_ISGID != 0 { p.gid } else { cred.gid };
        let create = Op::Create(NewInode {
            ino,
            mode: libc::S_IFCHR,
            uid: cred.uid,
            gid,
            rdev: 0,
            time,
            layout: Vec::new(),
            target: Vec::new(),
            parent: dir,
        });
        self.state().apply(&create, l)?;
        let mut l2 = self.state().lock(&[ino]);
        l.absorb(&mut l2);
        let link = Op::Link { dir, name: name.to_vec(), ino, time };
        self.state().apply(&link, l)?;
        ops.extend([create, link]);
        Ok(())
    }

    pub fn setattr(&self, cred: &Creds, ino: Ino, s: &SetAttr) -> Result<Attr> {
        self.check_writable()?;
        self.throttle()?;
        if let Some(size) = s.size {
            {
                let n = self.state().inode(ino)?;
                let d = n.data.read();
                if d.is_dir() {
                    return Err(Error::IsDir(format!("inode {ino}")));
                }
                if d.kind() != S_IFREG {
                    return Err(Error::Invalid(format!("truncate of inode {ino}")));
                }
                if !cred.allowed(&d, W) {
                    return Err(Error::Access(format!("inode {ino}")));
                }
                flags::check_change(&d, ino, "truncate")?;
            }
            self.truncate(ino, size)?;
        }
        let g = self.inner.gate.enter();
        let mut l = self.state().lock(&[ino]);
        let d = l.get(ino)?;
        let owner = cred.is_root() || cred.uid == d.uid;
        // Immutable: no change at all; append-only: times to now only.
        let explicit = s.mode.is_some() || s.uid.is_some() || s.gid.is_some();
        let explicit = explicit || matches!(s.atime, Some(Some(_))) || matches!(s.mtime, Some(Some(_)));
        if explicit || s.atime.is_some() || s.mtime.is_some() {
            let f = flags::of(d);
            if f & flags::IMMUTABLE != 0 || (explicit && f & flags::APPEND != 0) {
                return Err(Error::Perm(format!("attributes of inode {ino}, which is immutable or append-only")));
            }
        }
        let mut mode = s.mode.map(|m| m & 0o7777);
        let mut uid = None;
        let mut gid = None;
        if let Some(m) = mode {
            if !owner {
                return Err(Error::Perm(format!("chmod of inode {ino}")));
            }
            // Non-members cannot set setgid on files (it is silently dropped).
            if !cred.is_root() && !d.is_dir() && !cred.in_group(d.gid) {
                mode = Some(m & !libc::S_ISGID);
            }
        }
        // POSIX: only the owner may chown to the owner it has, or chgrp to
        // the group it has or one of the caller's; naming the current
        // owner or group is no exception for anyone else.
        if let Some(u) = s.uid {
            if !(cred.is_root() || (cred.uid == d.uid && u == d.uid)) {
                return Err(Error::Perm(format!("chown of inode {ino}")));
            }
            uid = Some(u);
        }
        if let Some(gr) = s.gid {
            if !(cred.is_root() || (cred.uid == d.uid && (gr == d.gid || cred.in_group(gr)))) {
                return Err(Error::Perm(format!("chgrp of inode {ino}")));
            }
            gid = Some(gr);
        }
        // chown of a non-directory clears set-id bits (unless root keeps them via chmod).
        if (uid.is_some() || gid.is_some())
            && !d.is_dir()
            && d.mode & (libc::S_ISUID | libc::S_ISGID) != 0
            && mode.is_none()
        {
            mode = Some(without_setid(d.mode));
        }
        let t = now();
        let times = |v: Option<Option<i64>>| -> Result<Option<i64>> {
            match v {
                None => Ok(None),
                Some(None) => {
                    if !owner && !cred.allowed(d, W) {
                        return Err(Error::Access(format!("inode {ino}")));
                    }
                    Ok(Some(t))
                }
                Some(Some(x)) => {
                    if !owner {
                        return Err(Error::Perm(format!("utimes of inode {ino}")));
                    }
                    Ok(Some(x))
                }
            }
        };
        let atime = times(s.atime)?;
        let mtime = times(s.mtime)?;
        // chmod changes the access ACL's owner, mask and other entries too.
        let acl_op = match (s.mode, d.xattrs.get(acl::ACCESS.as_bytes())) {
            (Some(_), Some(v)) => Acl::decode(v)?.map(|mut a| {
                a.chmod(mode.unwrap_or(d.mode));
                Op::SetXattr { ino, name: acl::ACCESS.as_bytes().to_vec(), value: a.encode(), time: t }
            }),
            _ => None,
        };
        if mode.is_some() || uid.is_some() || gid.is_some() || atime.is_some() || mtime.is_some() {
            let mut ops = vec![Op::SetAttr { ino, mode, uid, gid, atime, mtime, ctime: t }];
            ops.extend(acl_op);
            for op in &ops {
                self.state().apply(op, &mut l)?;
            }
            self.log(&g, &ops);
        }
        Ok(attr_of(ino, l.get(ino)?))
    }

    pub fn getxattr(&self, cred: &Creds, ino: Ino, name: &[u8]) -> Result<Vec<u8>> {
        if name == LAYOUT_XATTR.as_bytes() {
            return Ok(self.layout_get(ino)?.into_bytes());
        }
        if name == MIGRATION_XATTR.as_bytes() {
            let m = self.migration_status(ino).ok_or_else(|| Error::NoAttr(MIGRATION_XATTR.into()))?;
            return Ok(m.to_string().into_bytes());
        }
        if name == DIR_LAYOUT_XATTR.as_bytes() {
            let s = self.dir_layout_get(ino)?;
            if s.is_empty() {
                return Err(Error::NoAttr(DIR_LAYOUT_XATTR.into()));
            }
            return Ok(s.into_bytes());
        }
        let n = self.state().inode(ino)?;
        let d = n.data.read();
        xattr_perm(cred, &d, name, R)?;
        d.xattrs.get(name).cloned().ok_or_else(|| Error::NoAttr(show(name)))
    }

    pub fn listxattr(&self, cred: &Creds, ino: Ino) -> Result<Vec<Vec<u8>>> {
        let n = self.state().inode(ino)?;
        let d = n.data.read();
        let shown =
            |k: &&Vec<u8>| (!k.starts_with(b"trusted.") || cred.is_root()) && k.as_slice() != flags::XATTR.as_bytes();
        Ok(d.xattrs.keys().filter(shown).cloned().collect())
    }

    /// Whether an inode has an access ACL (named users or groups beyond its mode).
    pub fn has_access_acl(&self, ino: Ino) -> bool {
        self.state().inode(ino).is_ok_and(|n| n.data.read().xattrs.contains_key(acl::ACCESS.as_bytes()))
    }

    /// An inode's flags (`chattr`): the `FS_*_FL` bits of `namespace::flags`.
    pub fn inode_flags(&self, ino: Ino) -> Result<u32> {
        let n = self.state().inode(ino)?;
        let d = n.data.read();
        Ok(flags::of(&d))
    }

    /// Sets an inode's flags: its owner or root, and only root sets or
    /// clears immutable and append-only (Linux's CAP_LINUX_IMMUTABLE).
    /// Flags other than `flags::ALL` are refused with EOPNOTSUPP.
    pub fn set_inode_flags(&self, cred: &Creds, ino: Ino, new: u32) -> Result<()> {
        self.check_writable()?;
        if new & !flags::ALL != 0 {
            return Err(Error::NotSupported(format!("inode flags {:#x}", new & !flags::ALL)));
        }
        let g = self.inner.gate.enter();
        let mut l = self.state().lock(&[ino]);
        let d = l.get(ino)?;
        if !(cred.is_root() || cred.uid == d.uid) {
            return Err(Error::Perm(format!("flags of inode {ino}")));
        }
        let old = flags::of(d);
        if (old ^ new) & flags::PRIVILEGED != 0 && !cred.is_root() {
            return Err(Error::Perm(format!("immutable or append-only flag of inode {ino}")));
        }
        let name = flags::XATTR.as_bytes().to_vec();
        let op = match (new, d.xattrs.contains_key(&name)) {
            _ if new == old && (new != 0 || !d.xattrs.contains_key(&name)) => return Ok(()),
            (0, true) => Op::RemoveXattr { ino, name, time: now() },
            _ => Op::SetXattr { ino, name, value: flags::encode(new), time: now() },
        };
        self.state().apply(&op, &mut l)?;
        self.log(&g, &[op]);
        Ok(())
    }

    /// Sets (or, with an empty ACL, removes) a POSIX ACL attribute, as
    /// Linux's `set_posix_acl` and `posix_acl_update_mode` do: the owner or
    /// root only; a default ACL on directories only; an access ACL sets the
    /// mode's permission bits (an ACL the mode says all of is not kept),
    /// and drops set-group-id where the caller is not in the file's group.
    fn set_acl(&self, cred: &Creds, ino: Ino, name: &[u8], value: Option<&[u8]>, xflags: i32) -> Result<()> {
        let new = match value {
            Some(v) => Acl::decode(v)?,
            None => None,
        };
        let g = self.inner.gate.enter();
        let mut l = self.state().lock(&[ino]);
        let d = l.get(ino)?;
        if d.kind() == S_IFLNK {
            return Err(Error::NotSupported(format!("POSIX ACL on symbolic link inode {ino}")));
        }
        let default = name == acl::DEFAULT.as_bytes();
        if default && !d.is_dir() && new.is_some() {
            return Err(Error::Access(format!("default ACL on non-directory inode {ino}")));
        }
        if !(cred.is_root() || cred.uid == d.uid) {
            return Err(Error::Perm(format!("ACL of inode {ino}")));
        }
        flags::check_change(d, ino, "ACL change")?;
        let exists = d.xattrs.contains_key(name);
        check_xattr_flags(xflags, exists, name)?;
        if value.is_none() && !exists {
            return Err(Error::NoAttr(show(name)));
        }
        let t = now();
        let mut ops = Vec::new();
        let mut keep = new;
        if !default {
            if let Some(a) = &keep {
                let mut mode = a.mode_of(d.mode) & 0o7777;
                if !cred.is_root() && !cred.in_group(d.gid) {
                    mode &= !libc::S_ISGID;
                }
                if mode != d.mode & 0o7777 {
                    ops.push(Op::SetAttr {
                        ino,
                        mode: Some(mode),
                        uid: None,
                        gid: None,
                        atime: None,
                        mtime: None,
                        ctime: t,
                    });
                }
                if a.is_minimal() {
                    keep = None;
                }
            }
        }
        match keep {
            Some(a) => ops.push(Op::SetXattr { ino, name: name.to_vec(), value: a.encode(), time: t }),
            None if exists => ops.push(Op::RemoveXattr { ino, name: name.to_vec(), time: t }),
            None => {}
        }
        if ops.is_empty() {
            return Ok(());
        }
        for op in &ops {
            self.state().apply(op, &mut l)?;
        }
        self.log(&g, &ops);
        Ok(())
    }

    /// flags: XATTR_CREATE (1) / XATTR_REPLACE (2).
    pub fn setxattr(&self, cred: &Creds, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> Result<()> {
        self.check_writable()?;
        self.throttle()?;
        // user.hurricane.open must be a valid open spec; it is kept canonical.
        let value = &crate::open_spec::check_xattr(name, value)?[..];
        let value = if name == crate::xattr::TXN.as_bytes() { super::txn::check_flag(value)? } else { value };
        if name == LAYOUT_XATTR.as_bytes() {
            let spec = std::str::from_utf8(value).map_err(|_| Error::Layout("layout spec is not UTF-8".into()))?;
            return self.layout_set(cred, ino, spec.trim_end_matches(['\n', '\0']));
        }
        if name == DIR_LAYOUT_XATTR.as_bytes() {
            let spec = std::str::from_utf8(value).map_err(|_| Error::Layout("layout spec is not UTF-8".into()))?;
            return self.dir_layout_set(cred, ino, spec.trim_end_matches(['\n', '\0']));
        }
        if name.is_empty() || name.len() > XATTR_NAME_MAX {
            return Err(if name.is_empty() {
                Error::Invalid("empty attribute name".into())
            } else {
                Error::Range(format!("attribute name of {} bytes", name.len()))
            });
        }
        if value.len() > XATTR_SIZE_MAX {
            return Err(Error::TooBig(format!("attribute value of {} bytes (limit {XATTR_SIZE_MAX})", value.len())));
        }
        if acl::is_acl_name(name) {
            return self.set_acl(cred, ino, name, Some(value), flags);
        }
        let g = self.inner.gate.enter();
        let mut l = self.state().lock(&[ino]);
        let d = l.get(ino)?;
        xattr_perm(cred, d, name, W)?;
        flags::check_change(d, ino, "attribute change")?;
        let exists = d.xattrs.contains_key(name);
        check_xattr_flags(flags, exists, name)?;
        let total: usize = d.xattrs.iter().filter(|(k, _)| k.as_slice() != name).map(|(k, v)| k.len() + v.len()).sum();
        if total + name.len() + value.len() > XATTR_TOTAL_MAX {
            return Err(Error::NoSpace(format!("extended attributes of inode {ino} (limit {XATTR_TOTAL_MAX} bytes)")));
        }
        let op = Op::SetXattr { ino, name: name.to_vec(), value: value.to_vec(), time: now() };
        self.state().apply(&op, &mut l)?;
        self.log(&g, &[op]);
        Ok(())
    }

    pub fn removexattr(&self, cred: &Creds, ino: Ino, name: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.throttle()?;
        if name == DIR_LAYOUT_XATTR.as_bytes() {
            return self.dir_layout_set(cred, ino, "");
        }
        if acl::is_acl_name(name) {
            return self.set_acl(cred, ino, name, None, 0);
        }
        let g = self.inner.gate.enter();
        let mut l = self.state().lock(&[ino]);
        let d = l.get(ino)?;
        // A writer may drop a file's capabilities: the kernel removes them
        // before a write, a truncate or a fallocate, with the writer's
        // credentials (as ext4 does, the write goes on without them).
        let writer_drops_caps = name == crate::xattr::CAPS.as_bytes() && cred.allowed(d, W);
        if !writer_drops_caps {
            xattr_perm(cred, d, name, W)?;
        }
        flags::check_change(d, ino, "attribute removal")?;
        if !d.xattrs.contains_key(name) {
            return Err(Error::NoAttr(show(name)));
        }
        let op = Op::RemoveXattr { ino, name: name.to_vec(), time: now() };
        self.state().apply(&op, &mut l)?;
        self.log(&g, &[op]);
        Ok(())
    }

    /// The canonical layout of a file.
    pub fn layout_get(&self, ino: Ino) -> Result<String> {
        let n = self.state().inode(ino)?;
        let d = n.data.read();
        match &d.body {
            Body::File(l) => Ok(l.get()?.spec().to_string()),
            Body::Dir(dir) => {
                Ok(if dir.layout.is_empty() { self.default_layout().to_string() } else { dir.layout.clone() })
            }
            _ => Err(Error::NoAttr(format!("inode {ino} has no layout"))),
        }
    }

    /// Whether giving the file at `path` the layout `spec` changes its tree
    /// in place (a replicate read policy), rather than moving its data.
    pub fn layout_changes_in_place(&self, path: &str, spec: &str) -> Result<bool> {
        let (_, cur, _) = self.file_layout(self.resolve(path)?)?;
        let lay = Layout::build(&self.file_spec(spec)?)?;
        Ok(crate::blocks::live_changes(&cur, &lay).is_ok())
    }

    /// Gives an empty regular file a new layout (a directory: its default);
    /// a file holding data is migrated to it (see `migrate`), unless the
    /// change can be made in place.
    pub fn layout_set(&self, cred: &Creds, ino: Ino, spec: &str) -> Result<()> {
        self.check_writable()?;
        let node = self.state().inode(ino)?;
        if node.data.read().is_dir() {
            return self.dir_layout_set(cred, ino, spec);
        }
        let lay = Layout::build(&self.file_spec(spec)?)?;
        self.note_layout(&lay);
        let mut e = Encoder::new();
        lay.encode(&mut e);
        let _io = node.io.write();
        let g = self.inner.gate.enter();
        let mut l = self.state().lock(&[ino]);
        let d = l.get(ino)?;
        if d.kind() != S_IFREG {
            return Err(Error::Invalid(format!("inode {ino} is not a regular file")));
        }
        if !(cred.is_root() || cred.uid == d.uid) {
            return Err(Error::Perm(format!("layout of inode {ino}")));
        }
        let cur = d.layout()?.cloned();
        let has_data = d.size > 0 || cur.as_ref().is_some_and(|l| l.root().next_data(0).is_some());
        if let (true, Some(cur)) = (has_data, cur) {
            // A file holding data keeps its tree; what may change in place
            // (a replicate read policy) goes through journalled node records.
            if let Ok(changes) = crate::blocks::live_changes(&cur, &lay) {
                let ops: Vec<Op> = changes.into_iter().map(|change| Op::Map { ino, change }).collect();
                for op in &ops {
                    self.state().apply(op, &mut l)?;
                }
                self.log(&g, &ops);
                return Ok(());
            }
        }
        if has_data {
            // Moved to the new tree while it stays in use.
            drop((l, g, _io));
            return self.migrate(ino, spec, &Default::default(), &|_| {}).map(|_| ());
        }
        let op = Op::SetLayout { ino, layout: e.into_inner() };
        self.state().apply(&op, &mut l)?;
        self.log(&g, &[op]);
        Ok(())
    }

    pub fn dir_layout_get(&self, ino: Ino) -> Result<String> {
        let n = self.state().inode(ino)?;
        let d = n.data.read();
        d.dir().map(|d| d.layout.clone()).ok_or_else(|| Error::NotDir(format!("inode {ino}")))
    }

    /// Sets the default layout for files created under a directory; the
    /// spec is checked against the pool now (an empty spec clears it).
    pub fn dir_layout_set(&self, cred: &Creds, ino: Ino, spec: &str) -> Result<()> {
        self.check_writable()?;
        let canon = if spec.trim().is_empty() {
            String::new()
        } else {
            let parsed = layout::parse(spec)?;
            // Built too: some checks belong to the block types themselves.
            Layout::build(&layout::resolve(&parsed, &self.pool_info())?)?;
            layout::canonical(parsed).to_string()
        };
        let g = self.inner.gate.enter();
        let mut l = self.state().lock(&[ino]);
        let d = l.get(ino)?;
        if !d.is_dir() {
            return Err(Error::NotDir(format!("inode {ino}")));
        }
        if !(cred.is_root() || cred.uid == d.uid) {
            return Err(Error::Perm(format!("layout of inode {ino}")));
        }
        let op = Op::SetDirLayout { ino, spec: canon };
        self.state().apply(&op, &mut l)?;
        self.log(&g, &[op]);
        Ok(())
    }

    /// The checks and effects of open(2) on an existing inode, for every
    /// front end (the mount and the native API call it alike): permission
    /// for the access mode (write for O_TRUNC; execute, not read, for an
    /// execve open, `O_EXEC_OPEN`), O_NOATIME only for the owner or root,
    /// EISDIR for a directory opened for writing, and O_TRUNC of a regular
    /// file, which for an unprivileged caller also clears set-user-id (and
    /// set-group-id of a group-executable file). The open is not counted:
    /// the caller does that with `open_inode` (or an open instance).
    pub fn open_as(&self, cred: &Creds, ino: Ino, flags: i32) -> Result<Attr> {
        let a = self.getattr(ino)?;
        let acc = flags & libc::O_ACCMODE;
        if a.is_dir() && (acc != libc::O_RDONLY || flags & libc::O_TRUNC != 0) {
            return Err(Error::IsDir(format!("inode {ino}")));
        }
        let need = if flags & O_EXEC_OPEN != 0 && a.is_file() { X } else { open_mask(flags) };
        self.access(cred, ino, need)?;
        flags::check_open(&self.state().inode(ino)?.data.read(), ino, flags)?;
        if flags & libc::O_NOATIME != 0 && !cred.is_root() && cred.uid != a.uid {
            return Err(Error::Perm(format!("O_NOATIME on inode {ino}")));
        }
        if flags & libc::O_TRUNC == 0 || !a.is_file() {
            return Ok(a);
        }
        self.truncate(ino, 0)?;
        if cred.is_root() {
            self.getattr(ino)
        } else {
            self.clear_setid(ino)
        }
    }

    /// Drops the set-id bits a change by an unprivileged caller drops
    /// ([`without_setid`]); returns the attributes after.
    pub fn clear_setid(&self, ino: Ino) -> Result<Attr> {
        let a = self.getattr(ino)?;
        let m = without_setid(a.mode);
        if m == a.mode & 0o7777 {
            return Ok(a);
        }
        self.setattr(&Creds::root(), ino, &SetAttr { mode: Some(m), ..Default::default() })
    }

    /// Drops the file's capabilities (`security.capability`), as Linux
    /// drops them on every write to a file, whoever writes: a changed
    /// program must not keep the privileges granted to the old one. The
    /// caller does it before the write. Costs a look at the inode's
    /// attributes when it has none.
    pub fn drop_caps(&self, ino: Ino) -> Result<()> {
        let n = self.state().inode(ino)?;
        if !n.data.read().xattrs.contains_key(crate::xattr::CAPS.as_bytes()) {
            return Ok(());
        }
        match self.removexattr(&Creds::root(), ino, crate::xattr::CAPS.as_bytes()) {
            // Dropped meanwhile by another writer.
            Err(Error::NoAttr(_)) => Ok(()),
            r => r,
        }
    }

    /// Counts an open handle: an unlinked inode stays until the last close.
    pub fn open_inode(&self, ino: Ino) -> Result<()> {
        let n = self.state().inode(ino)?;
        n.opens.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    pub fn release_inode(&self, ino: Ino) -> Result<()> {
        let Some(n) = self.state().get(ino) else { return Ok(()) };
        let prev = n.opens.fetch_sub(1, Ordering::AcqRel);
        if prev == 1 && n.data.read().nlink == 0 && self.check_writable().is_ok() {
            self.free_inode(ino)?;
        }
        Ok(())
    }

    /// Makes one file durable: its data and every meta-data change so far.
    /// Fails, once, if held writes of the file were lost with their device
    /// (`write_errors.rs`).
    pub fn fsync(&self, ino: Ino) -> Result<()> {
        self.commit_all()?;
        self.take_write_error(ino)
    }

    pub(crate) fn no_sink() -> &'static (dyn Fn(NodeRecord) + Sync) {
        &ignore
    }
}

/// Hurricane's attributes that only a file's owner (or root) may set or
/// remove, whoever may write the file.
const OWNER_ONLY: [&str; 2] = [crate::xattr::TXN, crate::xattr::OPEN];

fn xattr_perm(cred: &Creds, d: &InodeData, name: &[u8], mask: u32) -> Result<()> {
    if name.starts_with(b"user.") {
        if !(d.kind() == S_IFREG || d.is_dir()) {
            return Err(Error::Perm(format!(
                "user attributes on a {}",
                if d.kind() == S_IFLNK { "symlink" } else { "special file" }
            )));
        }
        if !cred.allowed(d, mask) {
            return Err(Error::Access(show(name)));
        }
        // Settings that change how others' requests on the file are served
        // (transaction protection takes locks for every writer; the open
        // policy chooses every opener's caching and prefetch) are the
        // owner's, like the layout.
        if mask == W && OWNER_ONLY.iter().any(|n| n.as_bytes() == name) && !(cred.is_root() || cred.uid == d.uid) {
            return Err(Error::Perm(show(name)));
        }
        Ok(())
    } else if name.starts_with(b"trusted.") || name.starts_with(b"security.") {
        if name.starts_with(b"trusted.") && !cred.is_root() {
            return Err(Error::Perm(show(name)));
        }
        if mask == W && !(cred.is_root() || cred.uid == d.uid) {
            return Err(Error::Perm(show(name)));
        }
        Ok(())
    } else if acl::is_acl_name(name) {
        // Anyone may read an ACL; changes are `Fs::set_acl`'s to check.
        Ok(())
    } else {
        // Other system.* names and unknown namespaces are not supported.
        Err(Error::NotSupported(show(name)))
    }
}

/// ACL attributes a new inode gets: (name, value).
type InheritedAcls = Vec<(&'static str, Vec<u8>)>;

/// A new node's mode and ACL attributes in directory `p`: with a default
/// ACL there, the mode masked by it and the inherited ACLs (no umask);
/// without one, the mode less the umask. Symbolic links take neither.
fn inherit_acl(p: &InodeData, kind: u32, mode: u32, umask: u32) -> Result<(u32, InheritedAcls)> {
    if kind == S_IFLNK {
        return Ok((mode, Vec::new()));
    }
    let default = match p.xattrs.get(acl::DEFAULT.as_bytes()) {
        Some(v) => Acl::decode(v)?,
        None => None,
    };
    let Some(default) = default else {
        return Ok((mode & !(umask & 0o777), Vec::new()));
    };
    let (mode, access) = default.create(mode);
    let mut out = Vec::new();
    if let Some(a) = access {
        out.push((acl::ACCESS, a.encode()));
    }
    if kind == S_IFDIR {
        out.push((acl::DEFAULT, default.encode()));
    }
    Ok((mode, out))
}
