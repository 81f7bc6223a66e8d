//! Open directories: where each listing ends, and the notification that
//! drops a listing the kernel caches.
//!
//! An entry's readdir offset is its cookie in the engine, kept while the
//! entry exists; new entries (a rename into the directory among them) get
//! cookies past every existing one. A listing read in many requests while
//! names come and go would meet them again and again, so each open
//! directory notes where its listing ends ([`Fs::readdir_end`]) when it
//! begins, at offset 0 (opendir(3), or rewinddir(3), after which POSIX
//! wants the directory as it is now), and lists nothing past that: every
//! listing ends, and an entry there from its start to its end is listed
//! once.
//!
//! The kernel keeps listings in the directory's page cache
//! (`FOPEN_CACHE_DIR`, kept across opens with `FOPEN_KEEP_CACHE`) and
//! serves later opens from it. It drops the cache itself after a change
//! it made through this mount (create, link, unlink, rename, mkdir, rmdir);
//! a change it did not see, it is told of ([`Streams::changed`],
//! `FUSE_NOTIFY_INVAL_INODE`). Every open still reaches the engine
//! (OPENDIR), which checks the caller may read the directory.

use crossbeam_utils::CachePadded;
use fuser::FileHandle;
use hurricane::Fs;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// `FUSE_NOTIFY_INVAL_INODE`.
const NOTIFY_INVAL_INODE: i32 = 2;

/// Bits of a directory's handle number below its id (the open flags,
/// as `handles::plain` sets them).
const FLAG_BITS: u32 = 4;

type Shard = CachePadded<Mutex<HashMap<u64, u64>>>;

/// The open directories' listing ends, by handle id, sharded so opens on
/// different threads rarely meet on one lock.
pub(crate) struct Streams {
    shards: Box<[Shard]>,
    next: AtomicU64,
    /// /dev/fuse, for notifications.
    notify: OnceLock<OwnedFd>,
}

impl Streams {
    pub fn new(shards: usize) -> Streams {
        let n = shards.max(1).next_power_of_two();
        Streams {
            shards: (0..n).map(|_| Default::default()).collect(),
            next: AtomicU64::new(1),
            notify: OnceLock::new(),
        }
    }

    fn shard(&self, id: u64) -> &Shard {
        &self.shards[id as usize & (self.shards.len() - 1)]
    }

    /// A handle for a new open of a directory (`plain`: the open flags'
    /// handle bits).
    pub fn open(&self, plain: FileHandle) -> FileHandle {
        let id = self.next.fetch_add(1, Ordering::Relaxed) & (u64::MAX >> FLAG_BITS);
        FileHandle(id << FLAG_BITS | plain.0 & ((1 << FLAG_BITS) - 1))
    }

    /// Where the listing of open `fh` of directory `ino` ends, for a
    /// request from `offset`: taken now at offset 0 (the listing begins)
    /// or when the open has none yet (a seekdir before any read).
    pub fn end(&self, fs: &Fs, ino: u64, fh: FileHandle, offset: u64) -> hurricane::Result<u64> {
        let id = fh.0 >> FLAG_BITS;
        if offset != 0 {
            if let Some(&end) = self.shard(id).lock().get(&id) {
                return Ok(end);
            }
        }
        let end = fs.readdir_end(ino)?;
        if id != 0 {
            self.shard(id).lock().insert(id, end);
        }
        Ok(end)
    }

    /// Forgets a closed directory's listing.
    pub fn close(&self, fh: FileHandle) {
        let id = fh.0 >> FLAG_BITS;
        self.shard(id).lock().remove(&id);
    }

    /// Takes /dev/fuse for notifications.
    pub fn start(&self, dev: OwnedFd) {
        let _ = self.notify.set(dev);
    }

    /// Tells the kernel that directory `ino` changed without its knowing
    /// (a change the engine made beside a request, or one a request made
    /// and then failed): it drops the listing and attributes it keeps.
    pub fn changed(&self, ino: u64) {
        let Some(dev) = self.notify.get() else { return };
        if let Err(e) = inval_inode(dev, ino) {
            // The kernel no longer knows the inode: nothing of it is kept.
            if e.raw_os_error() != Some(libc::ENOENT) {
                tracing::warn!("cannot drop the kernel's listing of directory {ino}: {e}");
            }
        }
    }
}

/// Sends `FUSE_NOTIFY_INVAL_INODE` for `ino`: its attributes, and its
/// cached pages from offset 0 on (for a directory, its listing).
fn inval_inode(dev: &OwnedFd, ino: u64) -> std::io::Result<()> {
    // struct fuse_out_header { u32 len; i32 error (the notify code); u64 unique (0) }
    // struct fuse_notify_inval_inode_out { u64 ino; i64 off; i64 len }
    let mut m = [0u8; 40];
    m[0..4].copy_from_slice(&40u32.to_ne_bytes());
    m[4..8].copy_from_slice(&NOTIFY_INVAL_INODE.to_ne_bytes());
    m[16..24].copy_from_slice(&ino.to_ne_bytes());
    // off 0, len 0: every page.
    match rustix::io::write(dev, &m)? {
        40 => Ok(()),
        n => Err(std::io::Error::other(format!("short write of {n} bytes"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_distinct_and_keep_the_flag_bits() {
        let s = Streams::new(4);
        let plain = FileHandle(0b1010);
        let (a, b) = (s.open(plain), s.open(plain));
        assert_ne!(a, b);
        assert_eq!(a.0 & 0xf, 0b1010);
        assert_eq!(b.0 & 0xf, 0b1010);
        assert_ne!(a.0 >> FLAG_BITS, 0);
    }
}
