//! FUSE over io_uring: requests reach the file system through one ring per
//! CPU instead of reads of /dev/fuse.
//!
//! The kernel queues a request on the ring of the CPU the calling thread
//! runs on, and each ring is served by a thread pinned to that CPU. So a
//! request and its reply wake a thread on the caller's own CPU, not one on
//! another: on virtual machines a wake-up across CPUs costs tens to
//! hundreds of microseconds (an inter-processor interrupt through the
//! hypervisor), which dominated every metadata operation through
//! /dev/fuse. The session's /dev/fuse threads stay: the kernel still sends
//! FORGET and INTERRUPT that way, and everything before the rings are ready.
//!
//! Each ring entry is a pair of buffers registered with the kernel: a
//! header (`fuse_uring_req_header`: the in/out header, the operation's own
//! header, and the entry's commit id and payload size) and a payload of the
//! connection's largest request. The kernel fills an entry and completes
//! its command; the thread rebuilds the request in /dev/fuse form for
//! fuser, which calls the same handlers as the /dev/fuse path; the reply is
//! written back into the entry and committed with the next fetch in one
//! command (`COMMIT_AND_FETCH`).

use crate::filesystem::HurricaneFuse;
use fuser::{RawDispatcher, ReplySink, SessionACL};
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use parking_lot::Mutex;
use std::cell::{Cell, UnsafeCell};
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::thread::JoinHandle;

const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// `fuse_uring_req_header`: in/out header (128), op header (128), then
/// `fuse_uring_ent_in_out` (flags, commit_id, payload_sz, padding, reserved).
const IN_OUT: usize = 0;
const OP_IN: usize = 128;
const ENT_COMMIT_ID: usize = 256 + 8;
const ENT_PAYLOAD_SZ: usize = 256 + 16;
const HEADER_SIZE: usize = 256 + 32;
const IN_HEADER: usize = 40;
const OUT_HEADER: usize = 16;

/// Requests in flight per CPU. Synchronous calls need one each; the rest
/// carry the kernel's background requests (readahead, releases).
const ENTRIES: usize = 8;
/// Tag of the eventfd read that wakes a ring for replies made elsewhere.
const WAKE: u64 = u64::MAX;
const RELEASE: u32 = 18;
const RELEASEDIR: u32 = 29;

/// Size of the operation's own header, which the kernel puts apart from
/// the rest of the request; `None` for operations never sent by ring.
fn op_header_size(opcode: u32) -> Option<usize> {
    Some(match opcode {
        // Names and paths only: the kernel sends an empty header.
        1 | 5 | 6 | 10 | 11 | 17 | 24 | 38 => 0, // lookup readlink symlink unlink rmdir statfs removexattr destroy
        3 => 16,                                 // getattr
        4 => 88,                                 // setattr
        8 => 16,                                 // mknod
        9 => 8,                                  // mkdir
        12 => 8,                                 // rename
        13 => 8,                                 // link
        14 | 27 => 8,                            // open, opendir
        15 | 16 | 28 | 44 => 40,                 // read, write, readdir, readdirplus
        18 | 29 => 24,                           // release, releasedir
        20 | 30 => 16,                           // fsync, fsyncdir
        21 => 8,                                 // setxattr (without FUSE_SETXATTR_EXT)
        22 | 23 => 8,                            // getxattr, listxattr
        25 => 24,                                // flush
        31..=33 => 48,                           // getlk, setlk, setlkw
        34 => 8,                                 // access
        35 | 51 => 16,                           // create, tmpfile
        37 => 16,                                // bmap
        39 => 32,                                // ioctl
        40 => 24,                                // poll
        43 => 32,                                // fallocate
        45 => 16,                                // rename2
        46 => 24,                                // lseek
        47 => 56,                                // copy_file_range
        50 => 8,                                 // syncfs
        52 => 24,                                // statx
        _ => return None,
    })
}

/// One registered entry's buffers. The kernel writes them while the entry
/// waits for a request; from the completion until its commit, only the
/// thread handling the request (or the one replying) touches them.
struct Entry {
    header: UnsafeCell<Box<[u8; HEADER_SIZE]>>,
    payload: UnsafeCell<Box<[u8]>>,
    iov: UnsafeCell<[libc::iovec; 2]>,
}

// SAFETY: access follows the ownership hand-over described on `Entry`.
unsafe impl Sync for Entry {}
// SAFETY: the buffers are owned boxes; the raw pointers in `iov` point into
// them, so they stay valid wherever the entry moves.
unsafe impl Send for Entry {}

impl Entry {
    fn new(payload: usize) -> Entry {
        let e = Entry {
            header: UnsafeCell::new(Box::new([0u8; HEADER_SIZE])),
            payload: UnsafeCell::new(vec![0u8; payload].into_boxed_slice()),
            iov: UnsafeCell::new([libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; 2]),
        };
        // SAFETY: nobody else sees the entry yet.
        unsafe {
            let iov = &mut *e.iov.get();
            iov[0] = libc::iovec { iov_base: (*e.header.get()).as_mut_ptr().cast(), iov_len: HEADER_SIZE };
            iov[1] = libc::iovec { iov_base: (*e.payload.get()).as_mut_ptr().cast(), iov_len: payload };
        }
        e
    }
}

/// A queue's state shared with the threads that may reply to its requests.
struct Queue {
    qid: u16,
    entries: Vec<Entry>,
    /// Entries whose replies are written and wait to be committed.
    done: Mutex<Vec<usize>>,
    /// Wakes the ring thread for replies made on other threads.
    wake: OwnedFd,
}

thread_local! {
    /// The queue the current thread serves, if it is a ring thread.
    static RING_QID: Cell<Option<u16>> = const { Cell::new(None) };
}

struct EntrySink {
    q: Arc<Queue>,
    idx: usize,
}

impl ReplySink for EntrySink {
    fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let e = &self.q.entries[self.idx];
        // SAFETY: the request of this entry is being answered; its buffers
        // are ours until the commit below hands them back to the kernel.
        let (header, payload) = unsafe { (&mut **e.header.get(), &mut **e.payload.get()) };
        let mut out = 0usize;
        let mut body = 0usize;
        for part in data {
            let mut part: &[u8] = part;
            if out < OUT_HEADER {
                let n = part.len().min(OUT_HEADER - out);
                header[IN_OUT + out..IN_OUT + out + n].copy_from_slice(&part[..n]);
                out += n;
                part = &part[n..];
            }
            let dst = payload
                .get_mut(body..body + part.len())
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "reply larger than the ring payload"))?;
            dst.copy_from_slice(part);
            body += part.len();
        }
        header[ENT_PAYLOAD_SZ..ENT_PAYLOAD_SZ + 4].copy_from_slice(&(body as u32).to_ne_bytes());
        self.q.done.lock().push(self.idx);
        if RING_QID.with(|c| c.get()) != Some(self.q.qid) {
            // Cannot fail short of a bad descriptor: an eventfd's counter
            // takes 2^64-2 wake-ups before a write would block.
            let _ = rustix::io::write(&self.q.wake, &1u64.to_ne_bytes());
        }
        Ok(())
    }
}

/// Handle on the ring threads; they end when the connection does.
pub struct Rings {
    threads: Vec<JoinHandle<()>>,
    ended: std::sync::mpsc::Receiver<()>,
}

impl Rings {
    /// Waits for the queues to finish their last requests once the
    /// connection is gone. The kernel completes every registered entry
    /// when it tears the rings down; should one never come back, the pool
    /// is closed after `limit` all the same.
    pub fn join(self, limit: std::time::Duration) {
        let until = std::time::Instant::now() + limit;
        for _ in 0..self.threads.len() {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if self.ended.recv_timeout(left).is_err() {
                tracing::warn!("an io_uring queue did not stop within {limit:?}; closing the pool anyway");
                return;
            }
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Whether the running kernel offers FUSE over io_uring to new mounts,
/// turning it on (root only) when `enable` is set. Once a mount has asked
/// for it, the kernel holds requests until the rings are up, so this also
/// checks that this process may create the rings at all (io_uring can be
/// disabled by sysctl or seccomp).
pub fn kernel_allows(enable: bool) -> bool {
    const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";
    if let Err(e) = IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(2) {
        tracing::info!("FUSE over io_uring unavailable: cannot create a ring: {e}");
        return false;
    }
    match std::fs::read_to_string(PARAM) {
        Ok(v) if v.trim() == "Y" || v.trim() == "1" => true,
        Ok(_) if enable => match std::fs::write(PARAM, "Y") {
            Ok(()) => {
                tracing::info!("enabled FUSE over io_uring ({PARAM})");
                true
            }
            Err(e) => {
                tracing::info!("FUSE over io_uring stays off: {PARAM}: {e}");
                false
            }
        },
        Ok(_) => false,
        Err(_) => false,
    }
}

/// Registers `ENTRIES` entries on one ring per possible CPU and serves them.
/// `payload` is the connection's largest request or reply body.
pub fn start(fs: &HurricaneFuse, dev: &OwnedFd, acl: SessionACL, payload: usize) -> io::Result<Rings> {
    let cpus = crate::workers::possible_cpus();
    // Before the queue threads pin themselves: the CPUs that the helper
    // threads of their requests go back to.
    hurricane::affinity::remember();
    let mut threads = Vec::with_capacity(cpus);
    let (tx, rx) = std::sync::mpsc::channel::<io::Result<()>>();
    let (ended_tx, ended) = std::sync::mpsc::channel::<()>();
    for qid in 0..cpus {
        let dispatcher = RawDispatcher::new(fs.secondary(), dev.try_clone()?, acl, &format!("uring-{qid}"));
        let dev = dev.try_clone()?;
        let handle = fs.secondary();
        let tx = tx.clone();
        let ended_tx = ended_tx.clone();
        let t = std::thread::Builder::new().name(format!("hurricane-uring-{qid}")).spawn(move || {
            let _ended = Ended(ended_tx);
            pin_to(qid);
            match Ring::new(handle, qid as u16, dev, payload) {
                Ok(mut ring) => {
                    let _ = tx.send(Ok(()));
                    if let Err(e) = ring.serve(&dispatcher) {
                        tracing::error!("io_uring queue {qid}: {e}");
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            }
        })?;
        threads.push(t);
    }
    drop(tx);
    for _ in 0..cpus {
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("an io_uring queue thread ended during setup")),
        }
    }
    Ok(Rings { threads, ended })
}

/// Tells `Rings::join` that a queue thread has ended, however it ends.
struct Ended(std::sync::mpsc::Sender<()>);

impl Drop for Ended {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

struct Ring {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    fs: HurricaneFuse,
    dev: OwnedFd,
    q: Arc<Queue>,
    sinks: Vec<Arc<dyn ReplySink>>,
    /// Commit ids and opcodes of the requests the entries hold.
    commit: Vec<u64>,
    opcode: Vec<u32>,
    wake_buf: Box<[u8; 8]>,
    request: Vec<u8>,
}

impl Ring {
    fn new(fs: HurricaneFuse, qid: u16, dev: OwnedFd, payload: usize) -> io::Result<Ring> {
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .build((2 * ENTRIES as u32 + 2).next_power_of_two())?;
        let wake = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)?;
        let q = Arc::new(Queue {
            qid,
            entries: (0..ENTRIES).map(|_| Entry::new(payload)).collect(),
            done: Mutex::new(Vec::new()),
            wake,
        });
        let sinks = (0..ENTRIES).map(|idx| Arc::new(EntrySink { q: q.clone(), idx }) as Arc<dyn ReplySink>).collect();
        let mut r = Ring {
            ring,
            fs,
            dev,
            q,
            sinks,
            commit: vec![0; ENTRIES],
            opcode: vec![0; ENTRIES],
            wake_buf: Box::new([0; 8]),
            request: Vec::new(),
        };
        for idx in 0..ENTRIES {
            let sqe = r.cmd(CMD_REGISTER, idx, 0);
            r.push(sqe)?;
        }
        r.arm_wake()?;
        // A registration the kernel refuses completes with an error, which
        // `serve` sees; the kernel then serves the connection by /dev/fuse.
        r.ring.submit()?;
        Ok(r)
    }

    /// A FUSE command SQE for entry `idx`.
    fn cmd(&self, op: u32, idx: usize, commit_id: u64) -> squeue::Entry128 {
        // struct fuse_uring_cmd_req { u64 flags; u64 commit_id; u16 qid; u8 pad[6]; }
        let mut cmd = [0u8; 80];
        cmd[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        cmd[16..18].copy_from_slice(&self.q.qid.to_ne_bytes());
        let iov = self.q.entries[idx].iov.get() as u64;
        let sqe = opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), op).cmd(cmd).addr(Some(iov)).build();
        with_len(sqe, 2).user_data(idx as u64)
    }

    fn push(&mut self, sqe: squeue::Entry128) -> io::Result<()> {
        // SAFETY: the buffers an SQE names live as long as the ring (in `q`).
        while unsafe { self.ring.submission().push(&sqe) }.is_err() {
            self.ring.submit()?;
        }
        Ok(())
    }

    fn arm_wake(&mut self) -> io::Result<()> {
        let sqe: squeue::Entry128 =
            opcode::Read::new(types::Fd(self.q.wake.as_raw_fd()), self.wake_buf.as_mut_ptr(), 8)
                .build()
                .user_data(WAKE)
                .into();
        self.push(sqe)
    }

    fn serve(&mut self, d: &RawDispatcher<HurricaneFuse>) -> io::Result<()> {
        RING_QID.with(|c| c.set(Some(self.q.qid)));
        let mut ready: Vec<(u64, i32)> = Vec::with_capacity(ENTRIES + 1);
        let mut live = ENTRIES;
        let mut yield_to_caller = may_leave_idle();
        while live > 0 {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            ready.clear();
            ready.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
            for &(tag, res) in &ready {
                if tag == WAKE {
                    self.arm_wake()?;
                    continue;
                }
                let idx = tag as usize;
                if res < 0 {
                    // The connection is ending (unmount or abort).
                    live -= 1;
                    if !matches!(-res, libc::ENOTCONN | libc::ECANCELED | libc::ENODEV | libc::ECONNABORTED) {
                        tracing::warn!(
                            "io_uring queue {}: entry {idx}: {}",
                            self.q.qid,
                            io::Error::from_raw_os_error(-res)
                        );
                    }
                    continue;
                }
                self.handle(d, idx);
            }
            let done: Vec<usize> = std::mem::take(&mut *self.q.done.lock());
            if done.is_empty() {
                continue;
            }
            // Releases are background requests: nobody waits for them.
            let wakes_caller = done.iter().any(|&idx| !matches!(self.opcode[idx], RELEASE | RELEASEDIR));
            for idx in done {
                let sqe = self.cmd(CMD_COMMIT_AND_FETCH, idx, self.commit[idx]);
                self.push(sqe)?;
            }
            // Otherwise the next wait submits them.
            if !wakes_caller || !yield_to_caller {
                continue;
            }
            // The commit wakes the caller. The scheduler puts a woken thread
            // on an idle CPU rather than on a busy one, and this CPU is busy
            // with us: the caller would move to the other CPU at every reply
            // and pay a cross-CPU wake-up each time. While we are SCHED_IDLE
            // the kernel counts this CPU as idle, so the caller wakes here
            // and preempts us at once; we sleep right after anyway.
            // Only where the thread may leave SCHED_IDLE again
            // ([`may_leave_idle`]).
            if set_policy(libc::SCHED_IDLE).is_err() {
                yield_to_caller = false;
                continue;
            }
            let r = self.ring.submit();
            if let Err(e) = set_policy(libc::SCHED_OTHER) {
                yield_to_caller = false;
                tracing::error!("io_uring queue {}: cannot leave SCHED_IDLE: {e}", self.q.qid);
            }
            r?;
        }
        Ok(())
    }

    /// Rebuilds the request of entry `idx` in /dev/fuse form and dispatches it.
    fn handle(&mut self, d: &RawDispatcher<HurricaneFuse>, idx: usize) {
        let e = &self.q.entries[idx];
        // SAFETY: the kernel completed this entry's command: it is ours now.
        let (header, payload) = unsafe { (&mut **e.header.get(), &**e.payload.get()) };
        let commit_id = u64::from_ne_bytes(header[ENT_COMMIT_ID..ENT_COMMIT_ID + 8].try_into().unwrap_or([0; 8]));
        self.commit[idx] = commit_id;
        let opcode = u32::from_ne_bytes(header[4..8].try_into().unwrap_or([0; 4]));
        self.opcode[idx] = opcode;
        let unique = u64::from_ne_bytes(header[8..16].try_into().unwrap_or([0; 8]));
        let size = u32::from_ne_bytes(header[ENT_PAYLOAD_SZ..ENT_PAYLOAD_SZ + 4].try_into().unwrap_or([0; 4])) as usize;
        let Some(op) = op_header_size(opcode).filter(|_| size <= payload.len()) else {
            tracing::warn!("io_uring queue {}: request {unique} with opcode {opcode}: not served by ring", self.q.qid);
            self.reply_error(idx, unique, libc::ENOSYS);
            return;
        };
        let total = IN_HEADER + op + size;
        self.request.clear();
        self.request.extend_from_slice(&header[IN_OUT..IN_OUT + IN_HEADER]);
        self.request[0..4].copy_from_slice(&(total as u32).to_ne_bytes());
        self.request.extend_from_slice(&header[OP_IN..OP_IN + op]);
        self.request.extend_from_slice(&payload[..size]);
        self.fs.count_ring_request(self.q.qid as usize);
        if let Err(err) = d.dispatch(&self.request, self.sinks[idx].clone()) {
            tracing::warn!("io_uring queue {}: request {unique} (opcode {opcode}): {err}", self.q.qid);
            self.reply_error(idx, unique, libc::EIO);
        }
    }

    fn reply_error(&self, idx: usize, unique: u64, errno: i32) {
        let mut h = [0u8; OUT_HEADER];
        h[0..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&(-errno).to_ne_bytes());
        h[8..16].copy_from_slice(&unique.to_ne_bytes());
        let _ = self.sinks[idx].send(&[IoSlice::new(&h)]);
    }
}

/// Sets the SQE's `len` (the number of iovecs the FUSE commands take),
/// which the crate's `UringCmd80` builder leaves at zero.
fn with_len(sqe: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // `len` sits at byte 24 of `struct io_uring_sqe`, the first half of the
    // 128-byte entry.
    const LEN_OFFSET: usize = 24;
    // SAFETY: `Entry128` is `#[repr(C)]` over the kernel's 128-byte SQE.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
    raw[LEN_OFFSET..LEN_OFFSET + 4].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above; every bit pattern of the bytes is a valid SQE.
    unsafe { std::mem::transmute(raw) }
}

fn set_policy(policy: i32) -> io::Result<()> {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: valid parameters for the calling thread.
    if unsafe { libc::sched_setscheduler(0, policy, &p) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether a thread of this process that made itself SCHED_IDLE may make
/// itself SCHED_OTHER again. Linux lets it only with CAP_SYS_NICE or an
/// RLIMIT_NICE of 20 and more: an unprivileged process (and root in a
/// container without CAP_SYS_NICE) would stay idle for good after its
/// first reply, and starve whenever anything else wants the CPU. Found
/// out once, on a thread of its own that is then let go.
fn may_leave_idle() -> bool {
    static MAY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MAY.get_or_init(|| {
        let may = probe_leave_idle();
        if !may {
            tracing::info!("FUSE over io_uring: replies do not yield the CPU to their callers (no CAP_SYS_NICE)");
        }
        may
    })
}

/// Tries, on a new thread (it inherits the caller's capabilities), to go
/// SCHED_IDLE and back.
fn probe_leave_idle() -> bool {
    std::thread::spawn(|| set_policy(libc::SCHED_IDLE).is_ok() && set_policy(libc::SCHED_OTHER).is_ok())
        .join()
        .unwrap_or(false)
}

fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            tracing::debug!("cannot pin io_uring queue thread to CPU {cpu}: {}", io::Error::last_os_error());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP_SYS_NICE: u32 = 23;

    /// The calling thread's capability sets (version 3: two 32-bit words
    /// each of effective, permitted, inheritable).
    fn caps() -> io::Result<([u32; 2], [u32; 6])> {
        let mut head = [0x2008_0522u32, 0u32];
        let mut data = [0u32; 6];
        // SAFETY: the header and data have the layout capget takes for
        // version 3; pid 0 is this thread.
        if unsafe { libc::syscall(libc::SYS_capget, head.as_mut_ptr(), data.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((head, data))
    }

    /// Drops CAP_SYS_NICE from the calling thread's effective set.
    fn drop_sys_nice() -> io::Result<()> {
        let (mut head, mut data) = caps()?;
        data[0] &= !(1 << CAP_SYS_NICE);
        // SAFETY: as in `caps`.
        if unsafe { libc::syscall(libc::SYS_capset, head.as_mut_ptr(), data.as_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    #[test]
    fn replies_yield_only_where_the_thread_can_leave_sched_idle_again() {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: a valid out-pointer.
        unsafe { libc::getrlimit(libc::RLIMIT_NICE, &mut lim) };
        let nice_allowed = lim.rlim_cur >= 20;
        let had = caps().expect("capget").1[0] & (1 << CAP_SYS_NICE) != 0;
        assert_eq!(probe_leave_idle(), had || nice_allowed, "CAP_SYS_NICE {had}, RLIMIT_NICE {}", lim.rlim_cur);
        // Without CAP_SYS_NICE the probe says no (unless RLIMIT_NICE
        // allows nice 0), and the thread asking is left as it was.
        let (may, policy) = std::thread::spawn(|| {
            drop_sys_nice().expect("capset");
            // SAFETY: querying this thread's policy.
            (probe_leave_idle(), unsafe { libc::sched_getscheduler(0) })
        })
        .join()
        .expect("probe thread");
        assert_eq!(may, nice_allowed, "RLIMIT_NICE {}", lim.rlim_cur);
        assert_eq!(policy, libc::SCHED_OTHER);
    }
}
