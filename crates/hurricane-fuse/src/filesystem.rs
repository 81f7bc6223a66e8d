//! The fuser `Filesystem` over a Hurricane engine.
//!
//! Every request runs on the thread that read it from the kernel (fuser
//! runs several such threads, each with its own cloned /dev/fuse
//! descriptor); nothing here takes a lock shared by all requests. Requests
//! that wait for long (fsync, which waits for a journal commit, a
//! transaction's commit, the pool's status walk) move to a thread of their
//! own, and large reads to the I/O threads (`workers`), so they never hold
//! a serving thread.
//!
//! No serving thread waits for a lock that another request or a
//! transaction holds (docs/SECURITY.md). Requests that may take a
//! transaction's range locks run inside `waiting_at_most(Duration::ZERO)`:
//! a read or write that finds its bytes locked fails at once, before it
//! changed anything, and runs again on a helper thread where it waits at
//! most the pool's bound (`txn_lock_wait`, then EAGAIN); a truncate,
//! fallocate, copy or O_TRUNC open of a protected file goes there from the
//! start. Each waiting request holds a permit (`waiting`), bounded per user
//! and per mount.
//!
//! Permissions are the engine's to check (unless mounted with
//! `default_permissions`), and the kernel keeps only names that every user
//! may reach anyway: see [`NameCache`].
//!
//! Each open has an entry in the handle table (`handles`), which names its
//! inode; the handle number records the open flags, and the engine counts
//! opens per inode so an unlinked file lives until its last release.

use crate::convert::{errno, file_attr, groups_of, kind, near_now, when};
use crate::handles::{self, Handles};
use crate::names::{searchable, NameCache, Names};
use crate::report::{CacheReport, JournalReport, OpReport, Space, StatsReport, Transport};
use crate::stats::{Op, Stats};
use crate::txn::Caller as TxnCaller;
use crate::waiting::Waiters;
use crate::workers::Workers;
use crossbeam_utils::CachePadded;
use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow, WriteFlags,
};
use hurricane::fs::waiting_at_most;
use hurricane::open::PageCache;
use hurricane::{Attr, Creds, Error, Fs, SetAttr};
use parking_lot::Mutex;
use std::cell::RefCell;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

pub use hurricane::xattr::{
    DIR_LAYOUT as DIR_LAYOUT_XATTR, LAYOUT as LAYOUT_XATTR, STATS as STATS_XATTR, STATUS as STATUS_XATTR,
};

/// Largest write request we ask the kernel for (it may cap it lower).
pub const MAX_WRITE: u32 = 1 << 20;
/// Readahead we ask for; the kernel caps it at its own offer, which the
/// mount then raises through sysfs (see `serve`).
pub const MAX_READAHEAD: u32 = 1 << 20;
/// How long a /dev/fuse reader pauses after FORGETs while the rings serve
/// everything else (see `pace_forgets`).
const FORGET_PACE: Duration = Duration::from_millis(2);
/// Reads at least this large (the kernel's readahead requests) are served
/// by the I/O threads (see `workers`), so a window's reads run together.
const OFF_THREAD_READ: u32 = 128 << 10;
/// Largest copy one copy_file_range request does (callers loop on short counts).
const MAX_COPY: u64 = 64 << 20;

const ROOT: u64 = 1;

/// The generation a reply gives with `a` (see `Attr::generation`): with
/// the inode number, what the kernel puts in the file handles it makes.
fn generation(a: &Attr) -> Generation {
    Generation(a.generation())
}

const R: u32 = 4;
const W: u32 = 2;

/// The lock bound of a serving thread: none may be waited for.
const NO_WAIT: Duration = Duration::ZERO;

/// A write request's own facts, kept for a write run again off the
/// serving thread.
#[derive(Debug, Clone, Copy)]
struct PlainWrite {
    ino: u64,
    offset: u64,
    /// A writeback of the kernel's page cache (`-o writeback_cache`).
    writeback: bool,
    append: bool,
    /// Clears a set-user-id bit (a caller without CAP_FSETID).
    unprivileged: bool,
    who: Caller,
}

/// A value for a getxattr or listxattr that gave a buffer of `size` bytes
/// (0: a size probe): ERANGE if it does not fit.
fn fit_xattr(size: u32, r: Result<Vec<u8>, Errno>) -> Result<Vec<u8>, Errno> {
    r.and_then(|v| if size != 0 && v.len() > size as usize { Err(Errno::ERANGE) } else { Ok(v) })
}

/// Answers a getxattr or listxattr with what [`fit_xattr`] made of it.
fn send_xattr(reply: ReplyXattr, size: u32, r: Result<Vec<u8>, Errno>) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len().min(u32::MAX as usize) as u32),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(e),
    }
}

/// Who sent a request, kept where the request outlives it (a request run
/// again off the serving thread).
#[derive(Debug, Clone, Copy)]
struct Caller {
    uid: u32,
    gid: u32,
    /// The calling thread.
    pid: u32,
}

impl Caller {
    fn of(req: &Request) -> Caller {
        Caller { uid: req.uid(), gid: req.gid(), pid: req.pid() }
    }

    fn creds(&self) -> Creds {
        Creds { uid: self.uid, gid: self.gid, groups: Vec::new() }
    }

    /// `creds` with the supplementary groups (read from /proc; root needs none).
    fn creds_with_groups(&self) -> Creds {
        let mut c = self.creds();
        if c.uid != 0 {
            c.groups = groups_of(self.pid);
        }
        c
    }
}

thread_local! {
    /// Read buffer of the serving thread, reused so large reads neither
    /// allocate nor zero memory each time.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Static facts about the mount for the stats report.
#[derive(Debug, Clone, Default)]
pub struct MountInfo {
    pub pool: String,
    pub mountpoint: String,
    pub threads: usize,
}

/// The request handlers. Cheap to clone: the /dev/fuse session and each
/// io_uring queue hold one, all over the same `Shared` state; only the
/// session's (the primary) closes the pool at `destroy`.
#[derive(Clone)]
pub struct HurricaneFuse {
    shared: Arc<Shared>,
    primary: bool,
}

pub struct Shared {
    fs: Fs,
    /// Live opens (HFS 3.1: each open of a file for reading has its own
    /// composition, from `user.hurricane.open` or the adaptive default).
    handles: Handles,
    /// How long the kernel may cache attributes.
    ttl: Duration,
    /// Which names the kernel may keep.
    names: Names,
    /// Open directories: where their listings end (`dirs`).
    dirs: crate::dirs::Streams,
    stats: Arc<Stats>,
    /// Serialises O_APPEND writes per inode (striped), so two appenders
    /// cannot both write at the same end of file.
    append: Box<[CachePadded<Mutex<()>>]>,
    info: MountInfo,
    started: Instant,
    /// What the kernel agreed to at init (for the stats report).
    negotiated: Mutex<Vec<String>>,
    /// Ask the kernel for FUSE over io_uring at init.
    want_uring: bool,
    /// Ask the kernel for its writeback cache at init (`-o writeback_cache`).
    want_writeback: bool,
    /// The kernel checks permissions (`default_permissions`): it is asked
    /// to evaluate POSIX ACLs too (FUSE_POSIX_ACL), which it does only
    /// under that option.
    want_posix_acl: bool,
    /// The kernel passes creation modes without the umask (FUSE_DONT_MASK).
    engine_umask: std::sync::atomic::AtomicBool,
    /// The kernel's background request limit (`MountOptions::max_background`).
    max_background: u16,
    /// The io_uring queues serve every request but FORGET and INTERRUPT.
    rings_ready: std::sync::atomic::AtomicBool,
    /// Write-only handles write past the page cache (`write_only_direct`).
    direct_writes: std::sync::atomic::AtomicBool,
    /// The kernel agreed to `-o writeback_cache`: it holds written data
    /// (and the file's size) that has not reached the mount (`lseek`).
    kernel_writeback: std::sync::atomic::AtomicBool,
    /// Requests served through each CPU's io_uring queue.
    ring_requests: Box<[CachePadded<std::sync::atomic::AtomicU64>]>,
    /// Threads that serve large reads.
    readers: Workers,
    /// Scrub and device replacement jobs (`user.hurricane.control`).
    control: crate::control::Control,
    /// Transactions of programs that do not link the library, by the
    /// calling thread ([`crate::txn`]).
    txns: crate::txn::Txns,
    /// The longest a request waits for a lock (the pool's
    /// `TxnLimits::lock_wait`).
    lock_wait: Duration,
    /// Requests waiting off the serving threads, per user (`waiting`).
    waiters: Waiters,
    /// The pool's status, served as `user.hurricane.status` (`status`).
    status: crate::status::StatusCache,
    /// What makes the kernel see the engine's own changes (`coherence`).
    coherence: crate::coherence::Coherence,
    /// The kernel checks permissions too (`default_permissions`).
    kernel_permissions: bool,
    /// When reads update access times, and whether directories' too.
    atime: (crate::options::Atime, bool),
}

impl std::ops::Deref for HurricaneFuse {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}

/// Environment variable that sets the first handle id (tests start it
/// near the wrap of the id counter).
pub const FIRST_HANDLE_ENV: &str = "HURRICANE_TEST_FIRST_HANDLE";

fn first_handle() -> u64 {
    std::env::var(FIRST_HANDLE_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(1)
}

impl HurricaneFuse {
    pub fn new(
        fs: Fs,
        ttl: Duration,
        names: NameCache,
        info: MountInfo,
        o: &crate::MountOptions,
        want_uring: bool,
    ) -> Self {
        let n = hurricane::affinity::cpus().clamp(4, 64) * 4;
        // Two reads in flight per device keep every device busy while the
        // one before is being copied out. A device in a Ceph cluster spreads
        // its reads over many objects and OSDs, each read waiting for a
        // round trip: as many in flight as the mount serves requests.
        let remote = fs.storage().devs.iter().any(|d| hurricane::device::is_rados(&d.name()));
        let readers =
            if remote { crate::options::REMOTE_THREADS } else { (fs.pool_info().devices as usize * 2).clamp(4, 32) };
        let control = crate::control::Control::new(fs.clone(), std::path::PathBuf::from(&info.pool));
        let lock_wait = fs.txn_usage().limits.lock_wait;
        let shared = Shared {
            fs,
            handles: Handles::starting_at(n, first_handle()),
            ttl,
            names: Names::new(names),
            dirs: crate::dirs::Streams::new(n),
            stats: Arc::new(Stats::new()),
            append: (0..n).map(|_| CachePadded::new(Mutex::new(()))).collect(),
            info,
            started: Instant::now(),
            negotiated: Mutex::new(Vec::new()),
            want_uring,
            want_writeback: o.writeback_cache,
            want_posix_acl: o.kernel_permissions,
            engine_umask: std::sync::atomic::AtomicBool::new(false),
            max_background: o.max_background,
            rings_ready: std::sync::atomic::AtomicBool::new(false),
            direct_writes: std::sync::atomic::AtomicBool::new(false),
            kernel_writeback: std::sync::atomic::AtomicBool::new(false),
            ring_requests: (0..crate::workers::possible_cpus()).map(|_| Default::default()).collect(),
            readers: Workers::new(readers),
            control,
            txns: crate::txn::Txns::new(lock_wait),
            lock_wait,
            waiters: Waiters::default(),
            status: Default::default(),
            coherence: crate::coherence::Coherence::new(n),
            kernel_permissions: o.kernel_permissions,
            atime: (o.atime, o.nodiratime),
        };
        HurricaneFuse { shared: Arc::new(shared), primary: true }
    }

    /// Another handle on the same state, for an io_uring queue: its
    /// `destroy` leaves the pool open.
    pub fn secondary(&self) -> Self {
        HurricaneFuse { shared: self.shared.clone(), primary: false }
    }

    fn names(&self) -> NameCache {
        self.names.get()
    }

    /// Takes the mount's /dev/fuse descriptor for notifications (see
    /// `Names::start`).
    pub fn start_notifications(&self, dev: std::os::fd::OwnedFd) {
        match dev.try_clone() {
            Ok(d) => self.dirs.start(d),
            Err(e) => tracing::warn!("no notification channel for directory listings: {e}"),
        }
        self.names.start(dev);
    }

    /// Takes the session's notifier, through which the kernel learns of
    /// the engine's own changes (`coherence`).
    pub fn start_coherence(&self, n: fuser::Notifier) {
        self.coherence.start(n);
    }

    /// How long the kernel may keep a name in directory `dir`.
    fn name_ttl(&self, dir: u64) -> Duration {
        self.names.ttl(self.ttl, || self.search_mode(dir))
    }

    /// A directory's mode as the name rule sees it: one with an access ACL
    /// counts as not searchable by every user (its named entries may
    /// refuse some), so its names are not kept.
    fn search_mode(&self, dir: u64) -> Option<u32> {
        let a = self.fs.getattr(dir).ok()?;
        Some(if self.fs.has_access_acl(dir) { a.mode & !0o111 } else { a.mode })
    }

    /// The umask a creation request carries, where the kernel left it to
    /// us (FUSE_DONT_MASK); 0 where the kernel applied it already.
    fn umask(&self, umask: u32) -> u32 {
        if self.engine_umask.load(std::sync::atomic::Ordering::Relaxed) {
            umask & 0o777
        } else {
            0
        }
    }

    fn expire_names(&self) {
        self.names.expire();
    }

    /// The inode flag ioctls (`lsattr`/`chattr`), which the kernel sends
    /// for FS_IOC_GETFLAGS and FS_IOC_SETFLAGS (a 4-byte int) and for
    /// FS_IOC_FSGETXATTR and FS_IOC_FSSETXATTR (`struct fsxattr`, 28
    /// bytes; a SETFLAGS reads the old flags this way first). `None`: not
    /// one of them.
    fn flags_ioctl(&self, req: &Request, ino: u64, cmd: u32, input: &[u8]) -> Option<Result<Vec<u8>, Errno>> {
        use hurricane::namespace::flags;
        const GETFLAGS: [u32; 2] = [0x8008_6601, 0x8004_6601];
        const SETFLAGS: [u32; 2] = [0x4008_6602, 0x4004_6602];
        const FSGETXATTR: u32 = 0x801c_581f;
        const FSSETXATTR: u32 = 0x401c_5820;
        let word = |b: &[u8]| b.first_chunk::<4>().map(|w| u32::from_ne_bytes(*w)).ok_or(Errno::EINVAL);
        let t0 = Instant::now();
        let r = match cmd {
            c if GETFLAGS.contains(&c) => self.fs.inode_flags(ino).map_err(errno).map(|f| f.to_ne_bytes().to_vec()),
            c if SETFLAGS.contains(&c) => {
                word(input).and_then(|f| self.as_user(req, |c| self.fs.set_inode_flags(c, ino, f))).map(|()| Vec::new())
            }
            FSGETXATTR => self.fs.inode_flags(ino).map_err(errno).map(|f| {
                let mut x = vec![0u8; 28];
                x[..4].copy_from_slice(&flags::to_xflags(f).to_ne_bytes());
                x
            }),
            FSSETXATTR => word(input)
                .and_then(|x| flags::from_xflags(x).map_err(|_| Errno::EOPNOTSUPP))
                .and_then(|f| self.as_user(req, |c| self.fs.set_inode_flags(c, ino, f)))
                .map(|()| Vec::new()),
            _ => return None,
        };
        self.done(Op::Ioctl, t0, &r);
        Some(r)
    }

    /// After a directory's ACL changed: names the kernel keeps in it may
    /// now let through someone its entries refuse.
    fn acl_changed(&self, ino: u64, r: &Result<(), Errno>) {
        if r.is_ok() && self.names() == NameCache::Searchable && self.fs.getattr(ino).is_ok_and(|a| a.is_dir()) {
            self.expire_names();
        }
    }

    /// Once the rings serve every request, /dev/fuse carries only FORGETs
    /// (and INTERRUPTs, which have no handler). Each FORGET that finds a
    /// reader waiting wakes it, and the unlinking caller pays for that
    /// wake-up (about 20 us here, a third of an unlink). A reader that
    /// pauses after each batch lets the kernel gather the next ones into
    /// one BATCH_FORGET, with no wake-up per inode.
    fn pace_forgets(&self) {
        if self.rings_ready.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(FORGET_PACE);
        }
    }

    /// Marks the io_uring queues as serving the mount.
    pub(crate) fn set_rings_ready(&self) {
        self.rings_ready.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts a request served by the io_uring queue `qid`.
    pub(crate) fn count_ring_request(&self, qid: usize) {
        if let Some(c) = self.ring_requests.get(qid) {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether the kernel agreed to serve requests through io_uring.
    pub fn uring_negotiated(&self) -> bool {
        self.negotiated.lock().iter().any(|n| n == "over_io_uring")
    }

    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Runs `f` with the caller's uid and gid; if that is refused, once
    /// more with its supplementary groups (read only when needed).
    fn as_user<T>(&self, req: &Request, f: impl Fn(&Creds) -> hurricane::Result<T>) -> Result<T, Errno> {
        self.as_caller(&Caller::of(req), f)
    }

    /// `as_user` for a request that outlived its `Request`.
    fn as_caller<T>(&self, who: &Caller, f: impl Fn(&Creds) -> hurricane::Result<T>) -> Result<T, Errno> {
        let mut c = who.creds();
        match f(&c) {
            Err(e) if c.uid != 0 && matches!(e.errno(), libc::EACCES | libc::EPERM) => {
                let groups = groups_of(who.pid);
                if groups.iter().all(|&g| g == c.gid) {
                    return Err(errno(e));
                }
                c.groups = groups;
                f(&c).map_err(errno)
            }
            r => r.map_err(errno),
        }
    }

    /// Like `as_user`, with the groups loaded first: for operations whose
    /// outcome depends on group membership without failing (a setgid bit
    /// silently dropped for non-members).
    fn as_caller_with_groups<T>(&self, who: &Caller, f: impl Fn(&Creds) -> hurricane::Result<T>) -> Result<T, Errno> {
        f(&who.creds_with_groups()).map_err(errno)
    }

    fn as_user_with_groups<T>(&self, req: &Request, f: impl Fn(&Creds) -> hurricane::Result<T>) -> Result<T, Errno> {
        self.as_caller_with_groups(&Caller::of(req), f)
    }

    /// Runs `job` on a helper thread of its own, where it may wait for a
    /// transaction's range locks (at most the pool's bound), and hands what
    /// it returns to `reply`. One user may have at most
    /// `waiting::PER_USER` such requests at once (the mount
    /// `waiting::TOTAL`): past that it fails at once with EAGAIN.
    fn wait_off_thread<T: Send + 'static>(
        &self,
        uid: u32,
        op: Op,
        t0: Instant,
        job: impl FnOnce(&HurricaneFuse) -> Result<T, Errno> + Send + 'static,
        reply: impl FnOnce(Result<T, Errno>) + Send + 'static,
    ) {
        let Some(permit) = self.waiters.admit(uid) else {
            let r = Err(Errno::EAGAIN);
            self.done(op, t0, &r);
            return reply(r);
        };
        let me = self.secondary();
        hurricane::helpers::detach(move || {
            let r = job(&me);
            drop(permit);
            me.done(op, t0, &r);
            reply(r);
        });
    }

    /// The transaction of the calling thread, if it began one (and is still
    /// the thread and the user that did).
    fn txn_of(&self, who: &Caller) -> Option<crate::txn::Handle> {
        self.txns.of(who.pid, who.uid)
    }

    /// One write request: through the caller's transaction if it has one,
    /// else to the engine (at the end of file for an append).
    fn serve_write(&self, w: &PlainWrite, data: &[u8]) -> hurricane::Result<usize> {
        let ino = w.ino;
        // The kernel drops a file's capabilities before a write through
        // the page cache, not before a direct one (write-only and
        // `cache=none` handles): dropped here, before the data changes.
        // The request does not say which of the two it is, so a
        // write-through write looks too (a lookup of the inode's
        // attributes). A writeback of the kernel's cache (`-o
        // writeback_cache`) had its write(2) checked.
        if !w.writeback {
            self.fs.drop_caps(ino)?;
        }
        let mode = self.fs.getattr(ino)?.mode;
        let n = if let Some(t) = self.txn_of(&w.who) {
            // An append goes after what the transaction wrote already.
            let at = if w.append { t.size(ino)? } else { w.offset };
            t.write(ino, at, data)?
        } else if w.append {
            let stripe = &self.append[(ino as usize) % self.append.len()];
            // (Held by an append waiting for a transaction's lock: this one
            // waits too, where it may.)
            let _g = match stripe.try_lock() {
                Some(g) => g,
                None if hurricane::fs::may_wait() => stripe
                    .try_lock_for(self.lock_wait)
                    .ok_or_else(|| Error::WouldBlock(format!("inode {ino}: appends wait for a transaction")))?,
                None => return Err(Error::LockWait(format!("inode {ino}: another append waits"))),
            };
            let size = self.fs.getattr(ino)?.size;
            self.fs.write(ino, size, data)?
        } else {
            self.fs.write(ino, w.offset, data)?
        };
        self.written_by(w.unprivileged, ino, mode, w.writeback);
        Ok(n)
    }

    /// The work of a setattr request (see `setattr` for the two flags).
    fn serve_setattr(
        &self,
        who: &Caller,
        ino: u64,
        mut s: SetAttr,
        fh: Option<u64>,
        flushed_mtime: bool,
        kernel_now: bool,
    ) -> Result<Attr, Errno> {
        let size = s.size.take();
        if let Some(sz) = size {
            self.refuse_own_txn(who, ino)?;
            // ftruncate on a descriptor open for writing needs no
            // permission check now (it was checked at open).
            if fh.is_some_and(|fh| self.handles.writable_on(FileHandle(fh), ino)) {
                self.fs.truncate(ino, sz).map_err(errno)?;
            } else {
                s.size = Some(sz);
            }
        }
        let needs_groups = s.mode.is_some_and(|m| m & libc::S_ISGID != 0) || s.gid.is_some();
        let a = if needs_groups {
            self.as_caller_with_groups(who, |c| self.fs.setattr(c, ino, &s))?
        } else {
            match self.as_caller(who, |c| self.fs.setattr(c, ino, &s)) {
                Err(Errno::EPERM) if flushed_mtime || kernel_now => {
                    if !flushed_mtime {
                        self.as_caller(who, |c| self.fs.access(c, ino, W))?;
                    }
                    self.fs.setattr(&Creds::root(), ino, &s).map_err(errno)?
                }
                r => r?,
            }
        };
        if size.is_some() && a.mode & (libc::S_ISUID | libc::S_ISGID) != 0 {
            self.kill_setid(who.uid != 0, ino);
            return self.fs.getattr(ino).map_err(errno);
        }
        Ok(a)
    }

    /// The work of an open request: the handle, and whether it bypasses
    /// the page cache.
    fn serve_open(&self, who: &Caller, ino: u64, f: i32) -> Result<(u64, bool), Errno> {
        // The mode before an O_TRUNC that may clear set-id bits.
        let before = if f & libc::O_TRUNC != 0 {
            self.refuse_own_txn(who, ino)?;
            self.fs.getattr(ino).ok().map(|a| a.mode)
        } else {
            None
        };
        // Permission for the access mode (execute for an execve open),
        // O_NOATIME, O_TRUNC and set-id clearing: the engine's rules.
        let a = self.as_caller(who, |c| self.fs.open_as(c, ino, f))?;
        if before.is_some_and(|m| m != a.mode) {
            // (The kernel drops only the size and times it caches.)
            self.coherence.attrs_changed(ino);
        }
        if a.is_file() && self.fs.txn_protected(ino) {
            // Reads and writes of a protected file come here as their
            // callers make them (no page cache), so a transaction's
            // see its own writes and others see only committed data.
            self.fs.open_inode(ino).map_err(errno)?;
            return Ok((self.new_handle(ino, f, None), true));
        }
        if !a.is_file() {
            self.fs.open_inode(ino).map_err(errno)?;
            return Ok((self.new_handle(ino, f, None), false));
        }
        // The file's open policy: whether the page cache stands in
        // front of this handle, and how its reads prefetch.
        let spec = self.fs.open_policy_for(ino);
        let direct = spec.cache == PageCache::None;
        if f & libc::O_ACCMODE != libc::O_WRONLY {
            let of = hurricane::open::OpenFile::from_ino(&self.fs, ino, true, false, spec).map_err(errno)?;
            return Ok((self.new_handle(ino, f, Some(of)), direct));
        }
        self.fs.open_inode(ino).map_err(errno)?;
        Ok((self.new_handle(ino, f, None), direct || self.write_only_direct()))
    }

    /// Records an open in the handle table; an open that may read is
    /// counted as one through which the kernel may cache pages (`release`
    /// uncounts it).
    fn new_handle(&self, ino: u64, f: i32, file: Option<hurricane::open::OpenFile>) -> u64 {
        let fh = self.handles.insert(ino, f, file);
        if handles::readable(fh) {
            self.coherence.reader_opened(ino);
        }
        fh.0
    }

    /// How a handle of a file just made (CREATE, TMPFILE) is opened. A
    /// handle of a `cache=none` file (its directory's policy, for a new
    /// one) writes past the page cache from the first write, and so does a
    /// write-only one (`write_only_direct`). (Its reads, if any, go
    /// unprefetched: a new file is written first.)
    fn new_file_open(&self, ino: u64, flags: i32) -> FopenFlags {
        let write_only = flags & libc::O_ACCMODE == libc::O_WRONLY && self.write_only_direct();
        match self.fs.open_policy_for(ino).cache {
            PageCache::Page if !write_only => FopenFlags::FOPEN_NOFLUSH,
            _ => FopenFlags::FOPEN_NOFLUSH | FopenFlags::FOPEN_DIRECT_IO,
        }
    }

    /// A change outside the caller's transaction (truncate, fallocate) to a
    /// file the transaction has read or written would wait for the
    /// transaction's own locks: refused with EDEADLK.
    fn refuse_own_txn(&self, who: &Caller, ino: u64) -> Result<(), Errno> {
        match self.txn_of(who) {
            Some(t) if t.touches(ino) => Err(Errno::EDEADLK),
            _ => Ok(()),
        }
    }

    fn done<T>(&self, op: Op, t0: Instant, r: &Result<T, Errno>) {
        self.stats.record(op, t0, r.is_err());
    }

    fn entry(&self, reply: ReplyEntry, op: Op, t0: Instant, dir: u64, r: Result<Attr, Errno>) {
        self.done(op, t0, &r);
        match r {
            Ok(a) => reply.entry_with_ttls(&self.ttl, &self.name_ttl(dir), &file_attr(&a), generation(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn empty(&self, reply: ReplyEmpty, op: Op, t0: Instant, r: Result<(), Errno>) {
        self.done(op, t0, &r);
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn xattr_reply(&self, reply: ReplyXattr, op: Op, t0: Instant, size: u32, r: Result<Vec<u8>, Errno>) {
        let r = fit_xattr(size, r);
        self.done(op, t0, &r);
        send_xattr(reply, size, r);
    }

    /// Runs a request that waits on the devices (a journal commit) on a
    /// helper thread (`hurricane::helpers`), so the serving threads keep
    /// answering others.
    fn off_thread(&self, op: Op, reply: ReplyEmpty, f: impl FnOnce() -> hurricane::Result<()> + Send + 'static) {
        let t0 = Instant::now();
        let stats = self.stats.clone();
        hurricane::helpers::detach(move || {
            let r = f().map_err(errno);
            stats.record(op, t0, r.is_err());
            match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }

    fn serve_read(&self, ino: INodeNo, fh: FileHandle, offset: u64, size: u32, who: Caller, reply: ReplyData) {
        let t0 = Instant::now();
        let txn = self.txn_of(&who);
        // A transaction's reads lock what they read (shared) only for a
        // caller who may write the file: no reader can hold off its writers.
        let lock = txn.is_some() && self.as_caller(&who, |c| self.fs.access(c, ino.0, W)).is_ok();
        let held = READ_BUF.with(|b| {
            let mut buf = b.borrow_mut();
            let want = size as usize;
            if buf.len() < want {
                buf.resize(want, 0);
            }
            let r =
                waiting_at_most(NO_WAIT, || self.read_into(ino.0, fh, offset, txn.as_ref(), lock, &mut buf[..want]));
            if let Err(Some(Error::LockWait(_))) = r {
                return Some(reply);
            }
            let r = r.map_err(|e| e.map_or(Errno::EBADF, errno));
            self.done(Op::Read, t0, &r);
            match r {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(e),
            }
            // Do not keep a large buffer on every thread forever.
            if buf.len() > 4 * MAX_WRITE as usize {
                *buf = Vec::new();
            }
            None
        });
        if let Some(reply) = held {
            // Bytes a transaction locked: read where the wait may be made.
            self.wait_off_thread(
                who.uid,
                Op::Read,
                t0,
                move |me| {
                    let mut buf = vec![0u8; size as usize];
                    let n = me
                        .read_into(ino.0, fh, offset, txn.as_ref(), lock, &mut buf)
                        .map_err(|e| e.map_or(Errno::EBADF, errno))?;
                    buf.truncate(n);
                    Ok(buf)
                },
                move |r| match r {
                    Ok(b) => reply.data(&b),
                    Err(e) => reply.error(e),
                },
            );
        }
    }

    /// One read of a request: through the caller's transaction, its open
    /// instance, or the engine. `Err(None)`: not an open of `ino`.
    fn read_into(
        &self,
        ino: u64,
        fh: FileHandle,
        offset: u64,
        txn: Option<&crate::txn::Handle>,
        lock: bool,
        buf: &mut [u8],
    ) -> Result<usize, Option<Error>> {
        let of = self.handles.file(fh, ino).map_err(|_| None)?;
        match (of, txn) {
            // A transaction's reads see its own writes.
            (_, Some(t)) => t.read(ino, offset, buf, lock),
            (Some(of), None) => of.read_at(buf, offset),
            (None, None) => self.fs.read(ino, offset, buf),
        }
        .map_err(Some)
    }

    /// Whether write-only handles write past the page cache. Through the
    /// cache (write-through, the default) a write copies its data into the
    /// page cache and then sends it, and the first write to an inode since
    /// its attributes last came from us asks us for `security.capability`
    /// first: one more round trip for every new file. A write-only
    /// descriptor cannot read or map the file, so its copy would only
    /// serve other descriptors' later reads. A direct write goes in one
    /// request from the caller's buffer and the capability check is ours
    /// (`write`). Before it the kernel writes back and drops the cached
    /// pages of its range (with `direct_io_allow_mmap`, which `init`
    /// requires for this): a page another process dirtied through a shared
    /// mapping reaches us first, and readers then see the new data. With
    /// `-o writeback_cache` writes stay in the page cache: holding them
    /// there is that option's point.
    fn write_only_direct(&self) -> bool {
        self.direct_writes.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// After data was written to `ino` (with its set-id bits as they were
    /// before, `mode`): the engine cleared the set-id bits of a
    /// group-executable file; an unprivileged writer (or one the kernel
    /// says lacks CAP_FSETID) also clears a plain set-user-id bit. Either
    /// way the kernel learns of the new mode before the reply (not for a
    /// writeback of its cache: see `coherence`).
    fn written_by(&self, unprivileged: bool, ino: u64, mode: u32, writeback: bool) {
        if mode & (libc::S_ISUID | libc::S_ISGID) == 0 {
            return;
        }
        if unprivileged && self.fs.getattr(ino).is_ok_and(|a| a.mode & libc::S_ISUID != 0) {
            if let Err(e) = self.fs.clear_setid(ino) {
                tracing::warn!("inode {ino}: clearing set-id bits: {e}");
            }
        }
        if self.fs.getattr(ino).is_ok_and(|a| a.mode != mode) {
            if writeback {
                let me = self.secondary();
                hurricane::helpers::detach(move || me.coherence.attrs_changed(ino));
            } else {
                self.coherence.attrs_changed(ino);
            }
        }
    }

    /// Clears the set-id bits of `ino` after a change by an unprivileged
    /// caller (`Fs::clear_setid`); the kernel learns of the new mode.
    fn kill_setid(&self, unprivileged: bool, ino: u64) {
        if unprivileged {
            match self.fs.clear_setid(ino) {
                Ok(_) => self.coherence.attrs_changed(ino),
                Err(e) => tracing::warn!("inode {ino}: clearing set-id bits: {e}"),
            }
        }
    }

    /// A read of `ino` (a listing when `dir`) reached the mount: its access
    /// time follows the mount's rule (`noatime`, `relatime`, `strictatime`,
    /// `nodiratime`). The kernel keeps no access times for FUSE files (its
    /// inodes are `S_NOATIME`) and asks for them again after each read or
    /// listing it sends; reads it serves from its page cache do not reach
    /// the mount and leave the time as it is.
    fn accessed(&self, ino: u64, dir: bool) {
        use crate::options::Atime;
        let (rule, nodiratime) = self.atime;
        if rule == Atime::Never || (dir && nodiratime) {
            return;
        }
        if let Err(e) = self.fs.touch_atime(ino, rule == Atime::Strict) {
            tracing::debug!("inode {ino}: access time: {e}");
        }
    }

    /// Whether a removal of the extended attribute `name` is the kernel's
    /// own, made for its caller, and already checked. The kernel lets only
    /// a caller with CAP_SETFCAP remove `security.capability`, and removes
    /// it itself, with its caller's credentials, before that caller's
    /// write, fallocate or truncate through a descriptor open for writing
    /// (which the file's mode may no longer allow: ext4 goes on), or
    /// truncate or chown by path, once its own permission checks passed
    /// (`default_permissions`). Without them the kernel checks nothing
    /// before a truncate or chown by path, and the engine's rule holds: a
    /// caller who may write the file.
    fn killpriv(&self, name: &[u8]) -> bool {
        self.kernel_permissions && name == hurricane::xattr::CAPS.as_bytes()
    }

    /// The pool's status served as `user.hurricane.status`: the devices,
    /// and every file's health (a walk of the whole pool, which the
    /// statistics report, read often and by monitors, leaves out; shared
    /// and kept a while for users other than root, `status`). The paths of
    /// lost and degraded files are listed for root only: they name files in
    /// directories other users may not read. It may walk the pool: never
    /// called on a serving thread.
    pub fn status_report(&self, uid: u32) -> crate::report::StatusReport {
        self.status.report(&self.fs, &self.info.pool, &self.info.mountpoint, uid)
    }

    /// The statistics report served as `user.hurricane.stats`.
    pub fn stats_report(&self) -> StatsReport {
        let devices = crate::report::device_reports(&self.fs);
        let ops = Op::ALL
            .iter()
            .map(|&op| {
                let t = self.stats.totals(op);
                let avg_ns = t.total_ns.checked_div(t.count).unwrap_or(0);
                let r = OpReport { count: t.count, errors: t.errors, total_ns: t.total_ns, avg_ns, max_ns: t.max_ns };
                (op.name().to_string(), r)
            })
            .collect();
        let (commits, checkpoints) = self.fs.commit_counts();
        let st = self.fs.statfs();
        let report = self.fs.report();
        let cache = self.fs.cache_stats();
        let m = self.fs.meta_cache_stats();
        // Taken before the report is built: the lock is not reentrant.
        let kernel_features = self.negotiated.lock().clone();
        let io_uring = kernel_features.iter().any(|n| n == "over_io_uring");
        StatsReport {
            pool: self.info.pool.clone(),
            mountpoint: self.info.mountpoint.clone(),
            pid: std::process::id(),
            uptime_s: self.started.elapsed().as_secs_f64(),
            threads: self.info.threads,
            kernel_features,
            transport: Transport {
                io_uring,
                ring_requests: self
                    .ring_requests
                    .iter()
                    .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
                    .collect(),
            },
            space: Space { block_size: st.bsize, blocks: st.blocks, free_blocks: st.bfree, inodes: st.files },
            devices,
            journal: JournalReport {
                commits,
                checkpoints,
                unsynced_checkpoints: self.fs.unsynced_checkpoints(),
                replayed_ops_at_mount: report.replayed_ops as u64,
                was_clean_at_mount: report.was_clean,
            },
            cache: CacheReport {
                capacity: cache.capacity,
                bytes: cache.bytes,
                blocks: cache.blocks,
                hits: cache.hits,
                misses: cache.misses,
                waits: cache.waits,
                hit_rate: cache.hit_rate(),
                prefetched: cache.prefetched,
                prefetch_used: cache.prefetch_used,
                evictions: cache.evictions,
                invalidations: cache.invalidations,
            },
            meta: crate::report::MetaCacheReport {
                inodes: crate::report::KindReport {
                    hits: m.inodes.hits,
                    misses: m.inodes.misses,
                    evictions: m.inodes.evictions,
                },
                inodes_resident: m.inodes.resident,
                inodes_dirty: m.inodes.dirty,
                entries: crate::report::KindReport {
                    hits: m.store.entries.hits,
                    misses: m.store.entries.misses,
                    evictions: m.store.entries.evictions,
                },
                entry_reads: m.store.name_reads,
                record_reads: m.store.inode_reads,
                pages: crate::report::KindReport {
                    hits: m.store.page_hits,
                    misses: m.store.page_misses,
                    evictions: m.store.page_evictions,
                },
                store_bytes: m.store.bytes,
                store_commits: m.store.commits,
            },
            ops,
            compress: {
                let z = hurricane::blocks::compress_stats();
                crate::report::CompressReport {
                    chunks_compressed: z.chunks_compressed,
                    chunks_raw: z.chunks_raw,
                    chunks_zero: z.chunks_zero,
                    bytes_in: z.bytes_in,
                    bytes_stored: z.bytes_stored,
                    ratio: z.ratio(),
                    compress_ms: z.compress_ns as f64 / 1e6,
                    decompress_ms: z.decompress_ns as f64 / 1e6,
                    bytes_decompressed: z.bytes_decompressed,
                }
            },
            log: self
                .fs
                .log_stats()
                .into_iter()
                .map(|l| crate::report::LogReport {
                    device: l.device,
                    segments: l.segments,
                    live_blocks: l.live_blocks,
                    written_blocks: l.written_blocks,
                    moved_blocks: l.moved_blocks,
                    cleaned_segments: l.cleaned_segments,
                    background_segments: l.background_segments,
                    summary_blocks: l.summary_blocks,
                    write_amplification: l.write_amplification,
                })
                .collect(),
            groups: {
                let g = self.fs.group_stats();
                crate::report::GroupReport {
                    groups_opened: g.groups_opened,
                    groups_taken_over: g.groups_taken_over,
                    placed_blocks: g.placed_blocks,
                    group_reads: g.group_reads,
                    blocks_read_ahead: g.blocks_read_ahead,
                    cache_hits: g.cache_hits,
                    cached_blocks: g.cached_blocks,
                    held_blocks: g.held_blocks,
                    group_writes: g.group_writes,
                    blocks_drained: g.blocks_drained,
                    dirty_blocks: g.dirty_blocks,
                    blocks_lost: g.blocks_lost,
                }
            },
            transactions: {
                let u = self.fs.txn_usage();
                crate::report::TxnReport {
                    open: u.open,
                    buffered_bytes: u.bytes,
                    users: u.accounts,
                    max_open: u.limits.pool_open,
                    max_open_per_user: u.limits.user_open,
                    max_bytes: u.limits.pool_bytes,
                    max_bytes_per_user: u.limits.user_bytes,
                    max_bytes_per_txn: u.limits.bytes,
                    lock_wait_s: u.limits.lock_wait.as_secs_f64(),
                    waiting_requests: self.waiters.waiting(),
                }
            },
            status_walks: self.status.walks(),
            writable: self.fs.is_writable(),
            opened_read_only: self.fs.is_read_only(),
        }
    }
}

impl Filesystem for HurricaneFuse {
    fn init(&mut self, _req: &Request, cfg: &mut KernelConfig) -> std::io::Result<()> {
        if let Err(max) = cfg.set_max_write(MAX_WRITE) {
            let _ = cfg.set_max_write(max);
        }
        if let Err(max) = cfg.set_max_readahead(MAX_READAHEAD) {
            let _ = cfg.set_max_readahead(max);
        }
        let _ = cfg.set_max_background(self.max_background);
        let _ = cfg.set_congestion_threshold(self.max_background / 4 * 3);
        // POSIX record locks and flock locks stay with the kernel: its lock
        // manager is exact for a single-host mount, wakes F_SETLKW waiters
        // on signals, detects deadlocks, and drops a process's locks on any
        // close without a FLUSH request per close(2) (opens are NOFLUSH).
        // Writeback caching is off unless asked for: with it the kernel
        // holds writes and file times in its page cache and sends them
        // later (times as a setattr under whatever credentials flush them),
        // and resolves O_APPEND against its own idea of the size. fsync
        // still reaches the disk, but a write not yet fsync'd is lost with
        // the mount process, and appenders on two hosts' views (or the
        // native API beside the mount) would not see each other's ends.
        let wanted = [
            ("atomic_o_trunc", InitFlags::FUSE_ATOMIC_O_TRUNC),
            ("readdirplus", InitFlags::FUSE_DO_READDIRPLUS),
            ("readdirplus_auto", InitFlags::FUSE_READDIRPLUS_AUTO),
            ("parallel_dirops", InitFlags::FUSE_PARALLEL_DIROPS),
            ("async_dio", InitFlags::FUSE_ASYNC_DIO),
            ("handle_killpriv", InitFlags::FUSE_HANDLE_KILLPRIV),
            ("handle_killpriv_v2", InitFlags::FUSE_HANDLE_KILLPRIV_V2),
            ("cache_symlinks", InitFlags::FUSE_CACHE_SYMLINKS),
            ("async_read", InitFlags::FUSE_ASYNC_READ),
            ("big_writes", InitFlags::FUSE_BIG_WRITES),
            ("max_pages", InitFlags::FUSE_MAX_PAGES),
            // Shared mappings of handles opened without the page cache
            // (`cache=none`, transaction-protected files) go through it.
            ("direct_io_allow_mmap", InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP),
            // File handles (name_to_handle_at, NFS) stay valid after the
            // kernel forgets their inode and across mounts: it looks the
            // inode up again by number ("." and ".." in `lookup`).
            ("export_support", InitFlags::FUSE_EXPORT_SUPPORT),
        ];
        let uring = self.want_uring.then_some(("over_io_uring", InitFlags::FUSE_OVER_IO_URING));
        let writeback = self.want_writeback.then_some(("writeback_cache", InitFlags::FUSE_WRITEBACK_CACHE));
        // POSIX ACLs: the umask is the engine's to apply (only where the
        // directory has no default ACL), so the kernel passes modes
        // unmasked (FUSE_DONT_MASK). Where the kernel checks permissions it
        // also evaluates ACLs (FUSE_POSIX_ACL, which would turn its checks
        // on for every mount); otherwise the engine does, and the kernel
        // passes the ACL attributes through as any other.
        let acls = [
            Some(("dont_mask", InitFlags::FUSE_DONT_MASK)),
            self.want_posix_acl.then_some(("posix_acl", InitFlags::FUSE_POSIX_ACL)),
        ];
        let mut negotiated = self.negotiated.lock();
        for (name, f) in wanted.into_iter().chain(uring).chain(writeback).chain(acls.into_iter().flatten()) {
            match cfg.add_capabilities(f) {
                Ok(()) => negotiated.push(name.to_string()),
                Err(_) => tracing::info!("kernel lacks FUSE capability {name}"),
            }
        }
        // Kernels that let direct handles be mapped also write a range's
        // dirty pages back (and drop them) before a direct write to it:
        // with older ones, a page another process dirtied through a shared
        // mapping would be written back over the direct write.
        let allow_mmap = negotiated.iter().any(|n| n == "direct_io_allow_mmap");
        self.direct_writes.store(allow_mmap && !self.want_writeback, std::sync::atomic::Ordering::Relaxed);
        let dont_mask = negotiated.iter().any(|n| n == "dont_mask");
        self.engine_umask.store(dont_mask, std::sync::atomic::Ordering::Relaxed);
        let writeback = negotiated.iter().any(|n| n == "writeback_cache");
        self.kernel_writeback.store(writeback, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    fn destroy(&mut self) {
        if !self.primary {
            return;
        }
        self.control.shutdown();
        self.txns.abort_all();
        if let Err(e) = self.fs.close() {
            tracing::error!("closing the pool: {e}");
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let t0 = Instant::now();
        if matches!(name.as_bytes(), b"." | b"..") {
            // Only the kernel's export operations send these (a path walk
            // resolves them itself): "." of an inode the kernel forgot,
            // to open a file handle, and ".." of a directory, to connect
            // it to the root. The caller was checked by the kernel
            // (CAP_DAC_READ_SEARCH, or the NFS server), and the inode may
            // be of any kind. An inode that is gone answers ENOENT, which
            // the kernel turns into ESTALE.
            let r = if name.as_bytes() == b"." {
                self.fs.getattr(parent.0).map_err(errno)
            } else {
                self.fs.lookup(&Creds::root(), parent.0, b"..").map_err(errno)
            };
            self.entry(reply, Op::Lookup, t0, parent.0, r);
            return;
        }
        let r = self.as_user(req, |c| self.fs.lookup(c, parent.0, name.as_bytes()));
        if r == Err(Errno::ENOENT) {
            // A negative entry: the kernel remembers the name is absent
            // (every creation goes through it, so it cannot go stale).
            self.stats.record(Op::Lookup, t0, false);
            let mut a = file_attr(&Attr {
                ino: 0,
                size: 0,
                blocks: 0,
                atime: 0,
                mtime: 0,
                ctime: 0,
                btime: 0,
                mode: 0,
                nlink: 0,
                uid: 0,
                gid: 0,
                rdev: 0,
                blksize: 4096,
            });
            a.ino = INodeNo(0);
            reply.entry_with_ttls(&self.ttl, &self.name_ttl(parent.0), &a, Generation(0));
            return;
        }
        self.entry(reply, Op::Lookup, t0, parent.0, r);
    }

    fn forget(&self, _req: &Request, _ino: INodeNo, _nlookup: u64) {
        // The engine keeps every inode until it is unlinked and closed,
        // so the kernel's lookup counts need no tracking.
        self.stats.record(Op::Forget, Instant::now(), false);
        self.pace_forgets();
    }

    fn batch_forget(&self, _req: &Request, nodes: &[fuser::ForgetOne]) {
        for _ in nodes {
            self.stats.record(Op::Forget, Instant::now(), false);
        }
        self.pace_forgets();
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let t0 = Instant::now();
        let r = self.fs.getattr(ino.0).map_err(errno);
        self.done(Op::Getattr, t0, &r);
        match r {
            Ok(a) => reply.attr(&self.ttl, &file_attr(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let t0 = Instant::now();
        let ino = ino.0;
        // The mode before a chmod, where kept names may depend on it.
        let before = mode.filter(|_| self.names() == NameCache::Searchable).and_then(|_| self.search_mode(ino));
        // With the writeback cache the kernel sends times it keeps itself
        // as explicit times, under the credentials of whoever flushes or
        // asks: the mtime of the writes it flushes, through a descriptor
        // open for writing (an explicit time from utimensat(2) carries no
        // descriptor), and its clock's "now" (utimensat with no times,
        // truncate, a write clearing set-id bits), a time within a moment
        // of ours. Either is a writer's own update: refused to a caller who
        // is not the owner, it is made for any writer, with the kernel's
        // exact value.
        let (flushed_mtime, kernel_now) = match mtime {
            Some(TimeOrNow::SpecificTime(t)) if self.want_writeback && (mode, uid, gid) == (None, None, None) => (
                fh.is_some_and(|fh| self.handles.writable_on(fh, ino)) && (size, atime) == (None, None),
                matches!(atime, None | Some(TimeOrNow::Now)) && near_now(t),
            ),
            _ => (false, false),
        };
        let who = Caller::of(req);
        let s = SetAttr { mode, uid, gid, size, atime: when(atime), mtime: when(mtime) };
        let fh = fh.map(|f| f.0);
        let finish = move |me: &HurricaneFuse, r: &Result<Attr, Errno>| {
            if let (Some(b), Ok(a)) = (&before, &r) {
                if a.is_dir() && searchable(*b) && !searchable(a.mode) {
                    me.expire_names();
                }
            }
        };
        if size.is_some() && self.fs.txn_protected(ino) {
            // A truncate of a protected file locks the bytes it changes
            // against transactions: made where it may wait for them.
            let me = self.secondary();
            return self.wait_off_thread(
                who.uid,
                Op::Setattr,
                t0,
                move |f| f.serve_setattr(&who, ino, s, fh, flushed_mtime, kernel_now),
                move |r| {
                    finish(&me, &r);
                    match r {
                        Ok(a) => reply.attr(&me.ttl, &file_attr(&a)),
                        Err(e) => reply.error(e),
                    }
                },
            );
        }
        let r = waiting_at_most(NO_WAIT, || self.serve_setattr(&who, ino, s, fh, flushed_mtime, kernel_now));
        finish(self, &r);
        self.done(Op::Setattr, t0, &r);
        match r {
            Ok(a) => reply.attr(&self.ttl, &file_attr(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let t0 = Instant::now();
        let r = self.fs.readlink(ino.0).map_err(errno);
        self.done(Op::Readlink, t0, &r);
        match r {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let t0 = Instant::now();
        let umask = self.umask(umask);
        let f = |c: &Creds| self.fs.mknod_umask(c, parent.0, name.as_bytes(), mode, umask, rdev, None, None);
        let r = if mode & libc::S_ISGID != 0 { self.as_user_with_groups(req, f) } else { self.as_user(req, f) };
        self.entry(reply, Op::Mknod, t0, parent.0, r);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let t0 = Instant::now();
        let (umask, mode) = (self.umask(umask), libc::S_IFDIR | (mode & 0o7777));
        let r = self.as_user(req, |c| self.fs.mknod_umask(c, parent.0, name.as_bytes(), mode, umask, 0, None, None));
        self.entry(reply, Op::Mkdir, t0, parent.0, r);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let t0 = Instant::now();
        let r = self.as_user(req, |c| self.fs.unlink(c, parent.0, name.as_bytes()));
        self.empty(reply, Op::Unlink, t0, r);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let t0 = Instant::now();
        let r = self.as_user(req, |c| self.fs.rmdir(c, parent.0, name.as_bytes()));
        self.empty(reply, Op::Rmdir, t0, r);
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let t0 = Instant::now();
        let r =
            self.as_user(req, |c| self.fs.symlink(c, parent.0, link_name.as_bytes(), target.as_os_str().as_bytes()));
        self.entry(reply, Op::Symlink, t0, parent.0, r);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let t0 = Instant::now();
        // RENAME_WHITEOUT: overlay file systems' upper layers (the kernel
        // asked the caller for CAP_MKNOD).
        let known = RenameFlags::RENAME_NOREPLACE | RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT;
        let r = if !known.contains(flags) {
            Err(Errno::EINVAL)
        } else {
            let f = hurricane::RenameFlags {
                noreplace: flags.contains(RenameFlags::RENAME_NOREPLACE),
                exchange: flags.contains(RenameFlags::RENAME_EXCHANGE),
                whiteout: flags.contains(RenameFlags::RENAME_WHITEOUT),
            };
            self.as_user(req, |c| self.fs.rename(c, parent.0, name.as_bytes(), newparent.0, newname.as_bytes(), f))
        };
        // A name kept in a directory everyone may search, moved into one
        // not everyone may: the kernel keeps it under its new parent.
        if r.is_ok() && parent != newparent && self.names() == NameCache::Searchable {
            let open = |d: INodeNo| self.search_mode(d.0).is_some_and(searchable);
            if open(parent) != open(newparent) {
                self.expire_names();
            }
        }
        self.empty(reply, Op::Rename, t0, r);
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let t0 = Instant::now();
        // A file with no links reaches here only as the kernel allows it:
        // an unnamed file (O_TMPFILE, not O_EXCL), linked once.
        let r = self.as_user(req, |c| self.fs.link_unnamed(c, ino.0, newparent.0, newname.as_bytes()));
        self.entry(reply, Op::Link, t0, newparent.0, r);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let t0 = Instant::now();
        let (ino, f, who) = (ino.0, flags.0, Caller::of(req));
        let reply_open = |reply: ReplyOpen, r: Result<(u64, bool), Errno>| match r {
            Ok((fh, true)) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_NOFLUSH | FopenFlags::FOPEN_DIRECT_IO),
            Ok((fh, false)) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_NOFLUSH | FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
        };
        if f & libc::O_TRUNC != 0 && self.fs.txn_protected(ino) {
            // The truncate locks the file against transactions: made where
            // it may wait for them.
            let job = move |me: &HurricaneFuse| me.serve_open(&who, ino, f);
            return self.wait_off_thread(who.uid, Op::Open, t0, job, move |r| reply_open(reply, r));
        }
        let r = waiting_at_most(NO_WAIT, || self.serve_open(&who, ino, f));
        let r2 = r.as_ref().map(|_| ()).map_err(|e| *e);
        self.done(Op::Open, t0, &r2);
        reply_open(reply, r);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let who = Caller::of(_req);
        if flags.0 & libc::O_NOATIME == 0 {
            self.accessed(ino.0, false);
        }
        if size >= OFF_THREAD_READ {
            let me = self.clone();
            self.readers.run(move || me.serve_read(ino, fh, offset, size, who, reply));
        } else {
            self.serve_read(ino, fh, offset, size, who, reply);
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let t0 = Instant::now();
        let ino = ino.0;
        // The flags are the descriptor's current ones (fcntl F_SETFL may
        // have changed O_APPEND since open). Appends write at our own end
        // of file under the inode's append lock.
        let writeback = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        let append = flags.0 & libc::O_APPEND != 0 && !writeback;
        // (Set-id bits after the write: `written_by`.)
        let unprivileged = req.uid() != 0 || write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let w = PlainWrite { ino, offset, writeback, append, unprivileged, who: Caller::of(req) };
        // A direct write (O_DIRECT): pages a reader cached meanwhile go
        // (`coherence`).
        let direct = (!writeback && flags.0 & libc::O_DIRECT != 0).then(|| self.coherence.before_write(ino));
        let r = waiting_at_most(NO_WAIT, || self.serve_write(&w, data));
        if let Err(Error::LockWait(_)) = r {
            // Bytes a transaction locked: written where the wait may be made.
            let data = data.to_vec();
            let job = move |me: &HurricaneFuse| me.serve_write(&w, &data).map_err(errno);
            return self.wait_off_thread(w.who.uid, Op::Write, t0, job, move |r| match r {
                Ok(n) => reply.written(n.min(u32::MAX as usize) as u32),
                Err(e) => reply.error(e),
            });
        }
        let r = r.map_err(errno);
        self.done(Op::Write, t0, &r);
        match r {
            Ok(n) if n > 0 && direct.is_some_and(|d| self.coherence.may_cache(ino, d)) => {
                // Dropping pages waits for those under I/O: off the
                // serving thread, which may be the one to serve that I/O.
                let me = self.secondary();
                hurricane::helpers::detach(move || {
                    // (An append wrote at the end, wherever that was.)
                    let (at, len) = if w.append { (0, u64::MAX) } else { (offset, n as u64) };
                    me.coherence.drop_pages(ino, at, len);
                    reply.written(n.min(u32::MAX as usize) as u32);
                });
            }
            Ok(n) => reply.written(n.min(u32::MAX as usize) as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // Opens are NOFLUSH and writes reach the engine as they are made,
        // so a flush has nothing to do. It still comes under `-o
        // writeback_cache`, where the kernel ignores NOFLUSH: at every
        // close, after writing the file's cached pages back. ENOSYS tells
        // the kernel to send none from then on (locks are the kernel's,
        // and write-back errors come back from its own write-back, before
        // the request): one round trip less per close.
        self.stats.record(Op::Flush, Instant::now(), false);
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let t0 = Instant::now();
        // Dropping an instance releases its hold on the inode.
        let r = self.handles.remove(fh, ino.0).inspect(|_| {
            if handles::readable(fh) {
                self.coherence.reader_closed(ino.0);
            }
        });
        let r = r.and_then(|open| match open.file {
            Some(of) => {
                drop(of);
                Ok(())
            }
            None => self.fs.release_inode(ino.0).map_err(errno),
        });
        self.empty(reply, Op::Release, t0, r);
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let fs = self.fs.clone();
        self.off_thread(Op::Fsync, reply, move || fs.fsync(ino.0));
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let t0 = Instant::now();
        let r = (|| {
            let a = self.fs.getattr(ino.0).map_err(errno)?;
            if !a.is_dir() {
                return Err(Errno::ENOTDIR);
            }
            // Reading the entries is checked here, once, like open(2)
            // (and for every open: the kernel sends each one, listing
            // cached or not).
            self.as_user(req, |c| self.fs.access(c, ino.0, R))?;
            // Counted like a file's open: removed (or renamed over) while
            // open, the directory lives on, with no links, until its last
            // release (fstat of the descriptor, listing it: empty).
            self.fs.open_inode(ino.0).map_err(errno)?;
            Ok(self.dirs.open(handles::plain(flags.0)))
        })();
        self.done(Op::Opendir, t0, &r);
        match r {
            // The kernel keeps the listing for later opens (`dirs`).
            Ok(fh) => reply.opened(fh, FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let t0 = Instant::now();
        self.accessed(ino.0, true);
        // Entries are collected first and sent after the directory's lock
        // is released; the reply buffer takes what fits. The listing ends
        // where it did when it began (`dirs`).
        let mut items = Vec::new();
        let r = self
            .dirs
            .end(&self.fs, ino.0, fh, offset)
            .and_then(|end| {
                self.fs.readdir_to(&Creds::root(), ino.0, offset, end, |it| {
                    items.push(it);
                    items.len() < 512
                })
            })
            .map_err(errno);
        self.done(Op::Readdir, t0, &r);
        match r {
            Ok(()) => {
                for it in items {
                    if reply.add(INodeNo(it.ino), it.next, kind(it.kind), OsStr::from_bytes(&it.name)) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let t0 = Instant::now();
        self.accessed(ino.0, true);
        let mut items = Vec::new();
        let r = self
            .dirs
            .end(&self.fs, ino.0, fh, offset)
            .and_then(|end| {
                self.fs.readdir_to(&Creds::root(), ino.0, offset, end, |it| {
                    items.push(it);
                    items.len() < 256
                })
            })
            .map_err(errno);
        self.done(Op::Readdirplus, t0, &r);
        match r {
            Ok(()) => {
                let names = self.name_ttl(ino.0);
                for it in items {
                    // An entry removed since the listing is skipped.
                    let Ok(a) = self.fs.getattr(it.ino) else { continue };
                    if reply.add(
                        INodeNo(it.ino),
                        it.next,
                        OsStr::from_bytes(&it.name),
                        &names,
                        &file_attr(&a),
                        generation(&a),
                    ) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        let t0 = Instant::now();
        self.dirs.close(fh);
        let r = self.fs.release_inode(ino.0).map_err(errno);
        self.empty(reply, Op::Releasedir, t0, r);
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let fs = self.fs.clone();
        self.off_thread(Op::Fsyncdir, reply, move || fs.fsync(ino.0));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let t0 = Instant::now();
        let s = self.fs.statfs();
        self.stats.record(Op::Statfs, t0, false);
        // The engine counts inodes in use; statfs wants the total.
        reply.statfs(
            s.blocks,
            s.bfree,
            s.bavail,
            s.files.saturating_add(s.ffree),
            s.ffree,
            s.bsize,
            s.namelen,
            s.bsize,
        );
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let t0 = Instant::now();
        let n = name.as_bytes();
        if n == LAYOUT_XATTR.as_bytes() && self.fs.getattr(ino.0).is_ok_and(|a| a.is_file() && a.size > 0) {
            // A file holding data moves to the new layout (an online
            // migration), which takes as long as its copy: off the serving
            // thread, so the queue it came on keeps serving.
            let c = Caller::of(req).creds_with_groups();
            let (fs, value, ino) = (self.fs.clone(), value.to_vec(), ino.0);
            self.off_thread(Op::Setxattr, reply, move || {
                let r = fs.setxattr(&c, ino, LAYOUT_XATTR.as_bytes(), &value, flags);
                if let Err(e) = &r {
                    tracing::warn!("{LAYOUT_XATTR} on inode {ino}: {e}");
                }
                r
            });
            return;
        }
        let r = if ino.0 == ROOT && (n == STATS_XATTR.as_bytes() || n == STATUS_XATTR.as_bytes()) {
            Err(Errno::EPERM)
        } else if ino.0 == ROOT && n == crate::control::CONTROL_XATTR.as_bytes() {
            if req.uid() != 0 {
                Err(Errno::EPERM)
            } else {
                self.control.start(value).map_err(|e| {
                    tracing::warn!("{}: {e}", crate::control::CONTROL_XATTR);
                    Errno::EBUSY
                })
            }
        } else if hurricane::namespace::acl::is_acl_name(n) {
            // Whether set-group-id stays depends on the caller's groups.
            let r = self.as_user_with_groups(req, |c| self.fs.setxattr(c, ino.0, n, value, flags));
            self.acl_changed(ino.0, &r);
            r
        } else {
            self.as_user(req, |c| self.fs.setxattr(c, ino.0, n, value, flags))
        };
        if let Err(e) = r {
            if n == LAYOUT_XATTR.as_bytes() || n == DIR_LAYOUT_XATTR.as_bytes() {
                // Say why a layout was refused: the caller only sees an errno.
                let why = match std::str::from_utf8(value) {
                    Ok(spec) => self.layout_problem(ino.0, n, spec.trim_end_matches(['\n', '\0'])),
                    Err(_) => "the value is not UTF-8".to_string(),
                };
                // (Quoted and escaped: the value is the caller's.)
                tracing::warn!(
                    "{} on inode {}: {:?} (errno {}): {why:?}",
                    String::from_utf8_lossy(n),
                    ino.0,
                    String::from_utf8_lossy(value).trim_end_matches(['\n', '\0']),
                    e.code()
                );
            }
        }
        self.empty(reply, Op::Setxattr, t0, r);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let t0 = Instant::now();
        let n = name.as_bytes();
        let r = if ino.0 == ROOT && n == STATS_XATTR.as_bytes() {
            let mut v = self.stats_report().to_json();
            if size == 0 {
                // The counters grow between a size probe and the read:
                // leave room so the read that follows fits.
                v.resize(v.len() + 4096, b' ');
            }
            Ok(v)
        } else if ino.0 == ROOT && n == STATUS_XATTR.as_bytes() {
            // A walk of the pool: off the serving thread.
            let uid = req.uid();
            let job = move |me: &HurricaneFuse| {
                let mut v = me.status_report(uid).to_json();
                if size == 0 {
                    // Files may turn degraded between a size probe and the
                    // read: leave room for more listed paths.
                    v.resize(v.len() + 4096, b' ');
                }
                fit_xattr(size, Ok(v))
            };
            return self.wait_off_thread(uid, Op::Getxattr, t0, job, move |r| send_xattr(reply, size, r));
        } else if ino.0 == ROOT && n == crate::control::CONTROL_XATTR.as_bytes() {
            let mut v = self.control.status().to_json();
            if size == 0 {
                // Progress grows between a size probe and the read.
                v.resize(v.len() + 4096, b' ');
            }
            Ok(v)
        } else {
            self.as_user(req, |c| self.fs.getxattr(c, ino.0, n))
        };
        self.xattr_reply(reply, Op::Getxattr, t0, size, r);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let t0 = Instant::now();
        let r = self.as_user(req, |c| self.fs.listxattr(c, ino.0)).map(|names| {
            let mut out = Vec::new();
            for n in names {
                out.extend_from_slice(&n);
                out.push(0);
            }
            out
        });
        self.xattr_reply(reply, Op::Listxattr, t0, size, r);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let t0 = Instant::now();
        let r = if self.killpriv(name.as_bytes()) {
            self.fs.removexattr(&Creds::root(), ino.0, name.as_bytes()).map_err(errno)
        } else {
            self.as_user(req, |c| self.fs.removexattr(c, ino.0, name.as_bytes()))
        };
        if hurricane::namespace::acl::is_acl_name(name.as_bytes()) {
            self.acl_changed(ino.0, &r);
        }
        self.empty(reply, Op::Removexattr, t0, r);
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let t0 = Instant::now();
        let r = self.as_user(req, |c| self.fs.access(c, ino.0, mask.bits() as u32 & 7));
        self.empty(reply, Op::Access, t0, r);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let t0 = Instant::now();
        let mode = if mode & libc::S_IFMT == 0 { mode | libc::S_IFREG } else { mode };
        let umask = self.umask(umask);
        // Whether the name was made here, whatever happens after.
        let named = std::cell::Cell::new(false);
        let r = waiting_at_most(NO_WAIT, || {
            let mk = |c: &Creds| self.fs.mknod_umask(c, parent.0, name.as_bytes(), mode, umask, 0, None, None);
            let made =
                if mode & libc::S_ISGID != 0 { self.as_user_with_groups(req, mk) } else { self.as_user(req, mk) };
            let a = match made {
                Ok(a) => {
                    named.set(true);
                    a
                }
                // Lost a race with another creator: open what is there,
                // unless the caller asked for exclusive creation.
                // (Here a file that is there is opened without waiting: a
                // truncate a transaction's locks hold off fails with EAGAIN.
                // The kernel sends CREATE only for a name it found absent,
                // so this is a race with another creator.)
                Err(e) if e == Errno::EEXIST && flags & libc::O_EXCL == 0 => {
                    let a = self.as_user(req, |c| self.fs.lookup(c, parent.0, name.as_bytes()))?;
                    if a.is_dir() {
                        return Err(Errno::EISDIR);
                    }
                    self.as_user(req, |c| self.fs.open_as(c, a.ino, flags))?
                }
                Err(e) => return Err(e),
            };
            self.fs.open_inode(a.ino).map_err(errno)?;
            Ok((a, FileHandle(self.new_handle(a.ino, flags, None)), self.new_file_open(a.ino, flags)))
        });
        self.done(Op::Create, t0, &r);
        match r {
            // One timeout for the name and the attributes: in a directory
            // whose names are not kept, the attributes are not either.
            Ok((a, fh, open)) => reply.created(&self.name_ttl(parent.0), &file_attr(&a), generation(&a), fh, open),
            Err(e) => {
                reply.error(e);
                // A failed CREATE leaves the kernel's listing as it was,
                // and the name is there: the kernel is told.
                if named.get() {
                    self.dirs.changed(parent.0);
                }
            }
        }
    }

    /// `open(2)` with O_TMPFILE: an unnamed file, open once for the
    /// caller's handle, freed at its last close unless linked first.
    fn tmpfile(&self, req: &Request, parent: INodeNo, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        let t0 = Instant::now();
        let flags = flags & !libc::O_TMPFILE;
        let r = waiting_at_most(NO_WAIT, || {
            let mk = |c: &Creds| self.fs.tmpfile(c, parent.0, mode, umask, None);
            let a = if mode & libc::S_ISGID != 0 { self.as_user_with_groups(req, mk) } else { self.as_user(req, mk) }?;
            Ok((a, FileHandle(self.new_handle(a.ino, flags, None)), self.new_file_open(a.ino, flags)))
        });
        self.done(Op::Create, t0, &r);
        match r {
            Ok((a, fh, open)) => reply.created(&self.ttl, &file_attr(&a), generation(&a), fh, open),
            Err(e) => reply.error(e),
        }
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        use crate::txn::{TXN_ABORT, TXN_BEGIN, TXN_COMMIT};
        if let Some(r) = self.flags_ioctl(req, ino.0, cmd, in_data) {
            return match r {
                Ok(out) => reply.ioctl(0, &out),
                Err(e) => reply.error(e),
            };
        }
        if ![TXN_BEGIN, TXN_COMMIT, TXN_ABORT].contains(&cmd) {
            // Programs probe files with terminal ioctls (isatty); none apply.
            return reply.error(Errno::ENOTTY);
        }
        let t0 = Instant::now();
        // The calling thread, as the transaction knows it: gone already, it
        // has nothing to begin, commit or abort.
        let Some(who) = TxnCaller::of(req.pid(), req.uid()) else { return reply.error(Errno::ESRCH) };
        let r = match cmd {
            TXN_BEGIN => self.txns.begin(&self.fs, who),
            TXN_ABORT => self.txns.abort(who),
            _ => {
                // A commit waits for its files' I/O and the journal: off the
                // serving thread, like fsync.
                // The files' times (and sizes) are the commit's: the
                // kernel asks for them again (from this helper thread, no
                // request of theirs in flight).
                let job = move |me: &HurricaneFuse| {
                    let written = me.txns.commit(who).map_err(errno)?;
                    written.into_iter().for_each(|ino| me.coherence.attrs_changed(ino));
                    Ok(())
                };
                return self.wait_off_thread(req.uid(), Op::Ioctl, t0, job, move |r| match r {
                    Ok(()) => reply.ioctl(0, &[]),
                    Err(e) => reply.error(e),
                });
            }
        }
        .map_err(errno);
        self.done(Op::Ioctl, t0, &r);
        match r {
            Ok(()) => reply.ioctl(0, &[]),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let t0 = Instant::now();
        let (ino, who) = (ino.0, Caller::of(req));
        let job = move |me: &HurricaneFuse| -> Result<(), Errno> {
            me.refuse_own_txn(&who, ino)?;
            // Like a write, it drops the file's capabilities and (for an
            // unprivileged caller) its set-id bits.
            me.fs.drop_caps(ino).map_err(errno)?;
            me.fs.fallocate(ino, offset, length, mode).map_err(errno)?;
            if who.uid != 0 && me.fs.getattr(ino).is_ok_and(|a| a.mode & (libc::S_ISUID | libc::S_ISGID) != 0) {
                me.kill_setid(true, ino);
            }
            Ok(())
        };
        if self.fs.txn_protected(ino) {
            // Locked against transactions throughout: made where it may wait.
            return self.wait_off_thread(who.uid, Op::Fallocate, t0, job, move |r| match r {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            });
        }
        let r = waiting_at_most(NO_WAIT, || job(self));
        self.empty(reply, Op::Fallocate, t0, r);
    }

    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        let t0 = Instant::now();
        let r = match whence {
            // The kernel sends SEEK_DATA and SEEK_HOLE without writing its
            // dirty pages back first. Data it holds would look like a hole
            // here, and a program that copies only data (cp, tar --sparse)
            // would copy zeros in its place. With the kernel's writeback
            // cache any write may be held, the file's size too: ENOSYS
            // makes the kernel answer every later seek itself, from its
            // own size, the whole file data.
            libc::SEEK_DATA | libc::SEEK_HOLE if self.kernel_writeback.load(std::sync::atomic::Ordering::Relaxed) => {
                Err(Errno::ENOSYS)
            }
            libc::SEEK_DATA | libc::SEEK_HOLE if offset < 0 => Err(Errno::ENXIO),
            // Otherwise writes reach the mount before they return, and only
            // a shared writable mapping, made through a read-write open,
            // dirties pages the mount has not seen. While such an open
            // lives the file reports no hole; the size is the mount's.
            libc::SEEK_DATA | libc::SEEK_HOLE if self.handles.mappable_writes(ino.0) => match self.fs.getattr(ino.0) {
                Ok(a) if (offset as u64) < a.size => {
                    Ok(if whence == libc::SEEK_DATA { offset } else { a.size.min(i64::MAX as u64) as i64 })
                }
                Ok(_) => Err(Errno::ENXIO),
                Err(e) => Err(errno(e)),
            },
            libc::SEEK_DATA | libc::SEEK_HOLE => {
                match self.fs.seek_data_hole(ino.0, offset as u64, whence == libc::SEEK_DATA) {
                    Ok(Some(x)) => Ok(x.min(i64::MAX as u64) as i64),
                    Ok(None) => Err(Errno::ENXIO),
                    Err(e) => Err(errno(e)),
                }
            }
            // The kernel resolves SEEK_SET/CUR/END itself.
            _ => Err(Errno::EINVAL),
        };
        self.done(Op::Lseek, t0, &r);
        match r {
            Ok(x) => reply.offset(x),
            Err(e) => reply.error(e),
        }
    }

    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let t0 = Instant::now();
        let who = Caller::of(_req);
        let (ino_in, ino_out) = (ino_in.0, ino_out.0);
        let job = move |me: &HurricaneFuse| -> Result<u64, Errno> {
            if !flags.is_empty() {
                return Err(Errno::EINVAL);
            }
            me.copy_range(&who, ino_in, offset_in, ino_out, offset_out, len)
        };
        let reply_with = move |reply: ReplyWrite, r: Result<u64, Errno>| match r {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        };
        if self.fs.txn_protected(ino_out) {
            // Writes of a protected file lock their bytes against
            // transactions: made where they may wait.
            return self.wait_off_thread(who.uid, Op::CopyFileRange, t0, job, move |r| reply_with(reply, r));
        }
        let r = waiting_at_most(NO_WAIT, || job(self));
        self.done(Op::CopyFileRange, t0, &r);
        reply_with(reply, r);
    }
}

impl HurricaneFuse {
    /// Copies up to `len` bytes (at most `MAX_COPY`) from one file to
    /// another: through the caller's transaction if it has one (its reads
    /// and writes, as `read` and `write` would make them), else through the
    /// engine. Returns the count copied; an error only if nothing was.
    fn copy_range(
        &self,
        who: &Caller,
        ino_in: u64,
        off_in: u64,
        ino_out: u64,
        off_out: u64,
        len: u64,
    ) -> Result<u64, Errno> {
        // As for a write, the target's capabilities go first.
        self.fs.drop_caps(ino_out).map_err(errno)?;
        let mode = self.fs.getattr(ino_out).map_err(errno)?.mode;
        let txn = self.txn_of(who);
        let lock = txn.is_some() && self.as_caller(who, |c| self.fs.access(c, ino_in, W)).is_ok();
        let len = len.min(MAX_COPY);
        let mut buf = vec![0u8; len.min(MAX_WRITE as u64) as usize];
        let mut done = 0u64;
        let mut res = Ok(());
        while done < len {
            let want = (len - done).min(buf.len() as u64) as usize;
            let got = match &txn {
                Some(t) => t.read(ino_in, off_in + done, &mut buf[..want], lock),
                None => self.fs.read(ino_in, off_in + done, &mut buf[..want]),
            };
            let n = match got {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    res = Err(e);
                    break;
                }
            };
            let put = match &txn {
                Some(t) => t.write(ino_out, off_out + done, &buf[..n]),
                None => self.fs.write(ino_out, off_out + done, &buf[..n]),
            };
            if let Err(e) = put {
                res = Err(e);
                break;
            }
            done += n as u64;
        }
        if done > 0 {
            self.written_by(who.uid != 0, ino_out, mode, false);
        }
        // A partial copy reports what was copied; an error only if nothing was.
        match res {
            Err(e) if done == 0 => Err(errno(e)),
            _ => Ok(done),
        }
    }
}

impl HurricaneFuse {
    /// A readable reason a layout xattr was refused, for the log.
    fn layout_problem(&self, ino: u64, name: &[u8], spec: &str) -> String {
        match hurricane::layout::parse(spec) {
            Err(e) => return e.to_string(),
            Ok(parsed) => {
                if let Err(e) = hurricane::layout::resolve(&parsed, &self.fs.pool_info()) {
                    return e.to_string();
                }
            }
        }
        match self.fs.getattr(ino) {
            Ok(a) if name == LAYOUT_XATTR.as_bytes() && a.is_file() && a.size > 0 => {
                "the file already holds data: a layout can be set only on an empty file".into()
            }
            Ok(a) if name == DIR_LAYOUT_XATTR.as_bytes() && !a.is_dir() => "not a directory".into(),
            Ok(_) => "refused by the engine (permissions or file type)".into(),
            Err(e) => e.to_string(),
        }
    }
}
