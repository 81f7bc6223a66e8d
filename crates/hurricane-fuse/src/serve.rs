//! Serving a pool in the foreground: open, mount, answer requests until
//! unmounted, close. SIGTERM, SIGINT and SIGHUP flush and unmount; a
//! second one aborts the connection.

use crate::filesystem::{HurricaneFuse, MountInfo};
use crate::mountinfo::{fuse_mounts_at, unmount};
use crate::options::MountOptions;
use hurricane::{Fs, Options};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What to do about a mount point whose server has died.
pub const DEAD_MOUNT_HINT: &str = "a mount whose server died is still there; `hurricane umount` it first";

/// Whether an error from a mount point says its server is gone: ENOTCONN
/// once the connection is closed, ECONNABORTED while it is being torn down.
pub fn is_dead_mount(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED))
}

use nix::sys::signal::{SigSet, Signal};

fn signal_set() -> SigSet {
    let mut set = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        set.add(s);
    }
    set
}

/// Blocks the shutdown signals in this thread and every thread it starts
/// from now on, so only the watcher thread (sigwait) receives them.
fn block_signals() {
    if let Err(e) = signal_set().thread_block() {
        tracing::warn!("cannot block the shutdown signals: {e}");
    }
}

/// Waits for a shutdown signal (sigwait only fails for a bad set: taken
/// as SIGTERM).
fn wait_signal() -> Signal {
    signal_set().wait().unwrap_or(Signal::SIGTERM)
}

/// How long a mount waits for the pool's lock when no mount of the pool
/// is left (`mountinfo::lock_pool_dir`).
const LOCK_WAIT: Duration = Duration::from_secs(30);

/// Takes an exclusive lock on the pool directory for as long as the
/// returned file lives: two servers on one pool would corrupt it.
fn lock_pool(pool: &Path) -> Result<std::fs::File, String> {
    let f = std::fs::File::open(pool).map_err(|e| format!("{}: {e}", pool.display()))?;
    let op = rustix::fs::FlockOperation::NonBlockingLockExclusive;
    crate::mountinfo::lock_pool_dir(&f, pool, op, LOCK_WAIT).map_err(|e| format!("{}: {e}", pool.display()))?;
    Ok(f)
}

/// Readahead window of a mount, in KiB. The kernel cuts readahead into
/// requests of at most `MAX_READAHEAD` (1 MiB) and sends them without
/// waiting for each other; a window of one request left a single read in
/// flight, so the reader waited out every request's full round trip and
/// the devices worked one at a time. Eight keep two per device of the
/// default 4-wide stripe in flight (larger windows measured no faster).
const READAHEAD_KB: u32 = 8 << 10;

/// The kernel offers FUSE mounts only its default readahead (128 KiB);
/// large sequential reads want more, and root may raise it per mount.
fn raise_readahead(mnt: &Path) {
    let Some(m) = fuse_mounts_at(mnt).pop() else { return };
    let p = PathBuf::from(format!("/sys/class/bdi/{}:{}/read_ahead_kb", m.major, m.minor));
    let want = READAHEAD_KB.max(crate::MAX_READAHEAD / 1024);
    let cur: u32 = std::fs::read_to_string(&p).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    if cur < want {
        match std::fs::write(&p, want.to_string()) {
            Ok(()) => tracing::debug!("readahead raised to {want} KiB"),
            Err(e) => tracing::debug!("readahead stays at {cur} KiB ({}: {e})", p.display()),
        }
    }
}

/// Aborts the FUSE connection of the mount at `mnt` (the kernel fails
/// every pending and later request; the session then ends).
fn abort_connection(mnt: &Path) {
    if let Some(m) = fuse_mounts_at(mnt).pop() {
        let p = format!("/sys/fs/fuse/connections/{}/abort", m.minor);
        if let Err(e) = std::fs::write(&p, "1") {
            tracing::warn!("{p}: {e}");
        }
    }
}

/// Mounts the pool at `pool_dir` on `mountpoint` and serves it until it is
/// unmounted; then closes the pool (checkpoint, clean flag).
pub fn serve(pool_dir: &Path, mountpoint: &Path, o: &MountOptions) -> Result<(), String> {
    block_signals();
    let pool = pool_dir.canonicalize().map_err(|e| format!("{}: {e}", pool_dir.display()))?;
    let mnt = crate::mountinfo::absolute(mountpoint);
    match std::fs::metadata(&mnt) {
        Err(e) if is_dead_mount(&e) => {
            return Err(format!("{}: {DEAD_MOUNT_HINT}", mnt.display()));
        }
        Err(e) => return Err(format!("{}: {e}", mnt.display())),
        Ok(m) if !m.is_dir() => return Err(format!("{}: not a directory", mnt.display())),
        Ok(_) => {}
    }
    let _lock = lock_pool(&pool)?;
    let mut opts = Options { read_only: o.read_only, ..Options::default() };
    if let Some(d) = o.commit_interval {
        opts.commit_interval = d;
    }
    if let Some(d) = o.lease {
        opts.lease_duration = d;
    }
    opts.txn_limits = o.txn_limits;
    if let Some(b) = o.cache_bytes {
        opts.cache_bytes = b;
    }
    if let Some(n) = o.inode_cache {
        opts.inode_cache = n;
    }
    if let Some(n) = o.entry_cache {
        opts.entry_cache = n;
    }
    if let Some(b) = o.meta_cache_bytes {
        opts.meta_cache_bytes = usize::try_from(b).unwrap_or(usize::MAX);
    }
    let fs = Fs::open_dir(&pool, opts).map_err(|e| {
        let mut msg = e.to_string();
        // A pool another host writes: say so in the words scripts look for.
        if matches!(e, hurricane::Error::Busy(_)) {
            msg.push_str(" (EBUSY)");
        }
        if msg.contains(&*pool.to_string_lossy()) {
            msg
        } else {
            format!("{}: {msg}", pool.display())
        }
    })?;
    let rep = fs.report();
    tracing::info!(
        "pool {} opened: {} ({} journal ops replayed in {:?}, {} orphans freed, {} log writes rolled forward)",
        pool.display(),
        if rep.was_clean { "clean" } else { "recovered" },
        rep.replayed_ops,
        rep.replay_time,
        rep.orphans_freed,
        rep.rolled_forward.applied
    );
    let pool_name = pool.to_string_lossy().into_owned();
    let remote = fs.storage().devs.iter().any(|d| hurricane::device::is_rados(&d.name()));
    let o = &o.clone().for_pool(remote);
    let info = MountInfo {
        pool: pool_name.clone(),
        mountpoint: mnt.to_string_lossy().into_owned(),
        threads: o.thread_count(),
    };
    let want_uring = o.uring && crate::uring::kernel_allows(true);
    let fuse = HurricaneFuse::new(fs.clone(), o.attr_timeout, o.name_cache(), info, o, want_uring);
    let handlers = fuse.secondary();
    let config = o.fuser_config(&pool_name);
    let mut session = match fuser::Session::new(fuse, &mnt, &config) {
        Ok(s) => s,
        Err(e) => {
            let _ = fs.close();
            if is_dead_mount(&e) {
                return Err(format!("{}: {DEAD_MOUNT_HINT}", mnt.display()));
            }
            return Err(format!("cannot mount on {}: {e}", mnt.display()));
        }
    };
    tracing::info!("mounted {} on {} ({} threads)", pool.display(), mnt.display(), o.thread_count());
    handlers.start_coherence(session.notifier());
    match session.device_fd() {
        Ok(dev) => handlers.start_notifications(dev),
        Err(e) => tracing::warn!("no notification channel ({e}); names are not cached"),
    }
    raise_readahead(&mnt);
    // Remounts (read-only, read-write) are followed from the mount table.
    let remount_stop = Arc::new(AtomicBool::new(false));
    let remount_watch = match fuse_mounts_at(&mnt).pop() {
        Some(m) => crate::remount::watch(fs.clone(), m.minor, remount_stop.clone())
            .map_err(|e| tracing::warn!("cannot watch for remounts: {e}"))
            .ok(),
        None => None,
    };
    // Once the kernel agreed to io_uring it holds every request until the
    // rings are registered (or their registration fails): start them now.
    let rings = if handlers.uring_negotiated() {
        let payload = (crate::MAX_WRITE.max(crate::MAX_READAHEAD) as usize).max(1 << 13);
        match session.device_fd().and_then(|dev| crate::uring::start(&handlers, &dev, config.acl, payload)) {
            Ok(r) => {
                handlers.set_rings_ready();
                tracing::info!("serving {} through per-CPU io_uring queues", mnt.display());
                Some(r)
            }
            Err(e) => {
                tracing::error!("FUSE over io_uring: {e}; aborting the mount");
                abort_connection(&mnt);
                None
            }
        }
    } else {
        None
    };

    let mut unmounter = session.unmount_callable();
    let (wfs, wmnt) = (fs.clone(), mnt.clone());
    // Set when the session has ended: the watcher's next wake-up (the
    // signal sent to it below) is then only its cue to end.
    let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let wended = ended.clone();
    let is_ended = move || wended.load(std::sync::atomic::Ordering::Acquire);
    let watcher = std::thread::Builder::new().name("hurricane-signals".into()).spawn(move || {
        let sig = wait_signal();
        if is_ended() {
            return;
        }
        tracing::info!("signal {sig}: flushing and unmounting {}", wmnt.display());
        if let Err(e) = wfs.sync() {
            tracing::error!("flush on signal: {e}");
        }
        if let Err(e) = unmounter.unmount() {
            // Busy (open files, a shell inside): detach now; the session
            // ends when the last user leaves, with everything flushed above.
            tracing::warn!("unmount of {}: {e}; detaching lazily", wmnt.display());
            if let Err(e) = unmount(&wmnt, true) {
                tracing::error!("lazy unmount of {}: {e}", wmnt.display());
            }
        }
        let sig = wait_signal();
        if is_ended() {
            return;
        }
        tracing::warn!("signal {sig} again: aborting the connection of {}", wmnt.display());
        abort_connection(&wmnt);
    });
    let watcher = match watcher {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!("cannot watch for signals: {e}");
            None
        }
    };

    let run = session.run();
    if let Some(r) = rings {
        r.join(std::time::Duration::from_secs(10));
    }
    remount_stop.store(true, Ordering::Release);
    if let Some(w) = remount_watch {
        let _ = w.join();
    }
    // The watcher holds the pool and this mount point: in a process that
    // goes on after this mount (one that mounts again, an embedding
    // program) it must not outlive the session, nor act on a later signal
    // (it would unmount whatever is mounted at this path by then). A
    // signal sent to its thread alone wakes it (every shutdown signal is
    // blocked in it, and it waits for them), and it ends.
    ended.store(true, std::sync::atomic::Ordering::Release);
    if let Some(w) = watcher {
        // A watcher that acted on two signals has ended already.
        let woken = w.is_finished()
            || nix::sys::pthread::pthread_kill(std::os::unix::thread::JoinHandleExt::as_pthread_t(&w), Signal::SIGTERM)
                .map_err(|e| tracing::warn!("cannot end the signal watcher: {e}"))
                .is_ok();
        if woken {
            let _ = w.join();
        }
    }
    tracing::info!("{} unmounted; closing the pool", mnt.display());
    let closed = fs.close();
    run.map_err(|e| format!("serving {}: {e}", mnt.display()))?;
    closed.map_err(|e| format!("closing {}: {e}", pool.display()))
}
