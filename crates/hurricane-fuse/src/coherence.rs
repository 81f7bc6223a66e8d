//! What makes the kernel see the changes the mount makes on its own.
//!
//! The kernel caches a file's attributes (for the attribute timeout) and
//! its pages (across opens, `KEEP_CACHE`), and drops them after the changes
//! it sends itself: a write or a fallocate invalidates the cached size and
//! times, an O_TRUNC open the size and times. Some changes come from the
//! engine alone, and the kernel learns of them only from a notification
//! (FUSE_NOTIFY_INVAL_INODE):
//!
//! - set-id bits the engine clears after an unprivileged write, O_TRUNC
//!   open or fallocate (and the change time that goes with them): the
//!   kernel would keep showing, and with `-o suid` honouring at execve, the
//!   old mode. [`Coherence::attrs_changed`] drops the cached attributes
//!   (offset -1: attributes only), before the request is answered.
//! - data a direct write (O_DIRECT) changed under pages a reader cached
//!   while the write was on its way: the kernel drops a range's pages
//!   before such a write, and after it only for a synchronous one.
//!   [`Coherence::drop_pages`] drops them after the engine wrote the data,
//!   before the write is answered, where a reader may have cached some
//!   (`may_cache`).
//!
//! Deadlocks: the kernel serves a notification in the writer's thread. An
//! attributes-only one looks the inode up (waiting only for an inode
//! being freed or made, which no request in flight on it is) and marks
//! the attributes stale: it is sent from the serving thread, for the inode
//! of the request being served (which holds the inode), never for a
//! writeback of the kernel's cache (the inode may be on its way out,
//! waiting for that very write). Dropping pages waits for each locked page
//! of the range, and a page is locked while the kernel waits for a read or
//! write request of the mount to fill or send it, a request that may be
//! queued behind the one being served on the same queue: so pages are
//! dropped on a helper thread, which answers the write when it is done.

use crossbeam_utils::CachePadded;
use fuser::{INodeNo, Notifier};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Opens that may read through the page cache, by inode, sharded by inode.
type Counts = CachePadded<Mutex<HashMap<u64, u32>>>;

pub(crate) struct Coherence {
    /// The session's notification channel, once the mount is up.
    notifier: OnceLock<Notifier>,
    /// Live opens for reading, by inode: only through one can the kernel
    /// cache a file's pages.
    readers: Box<[Counts]>,
    /// Opens for reading made so far, of any inode: a reader that opened,
    /// read and closed while a direct write was on its way leaves pages.
    opened: AtomicU64,
}

/// Where a direct write stood when it started (`Coherence::before_write`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WriteStart {
    readers: bool,
    opened: u64,
}

impl Coherence {
    pub fn new(shards: usize) -> Coherence {
        Coherence {
            notifier: OnceLock::new(),
            readers: (0..shards.max(1)).map(|_| CachePadded::new(Mutex::new(HashMap::new()))).collect(),
            opened: AtomicU64::new(0),
        }
    }

    /// Takes the session's notification channel.
    pub fn start(&self, n: Notifier) {
        let _ = self.notifier.set(n);
    }

    fn shard(&self, ino: u64) -> &Mutex<HashMap<u64, u32>> {
        &self.readers[(ino % self.readers.len() as u64) as usize]
    }

    /// An open of `ino` that may read (its pages may enter the cache).
    pub fn reader_opened(&self, ino: u64) {
        self.opened.fetch_add(1, Ordering::AcqRel);
        *self.shard(ino).lock().entry(ino).or_insert(0) += 1;
    }

    /// The release of an open `reader_opened` counted.
    pub fn reader_closed(&self, ino: u64) {
        let mut s = self.shard(ino).lock();
        if let Some(n) = s.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                s.remove(&ino);
            }
        }
    }

    fn has_readers(&self, ino: u64) -> bool {
        self.shard(ino).lock().contains_key(&ino)
    }

    /// Taken before a direct write reaches the engine.
    pub fn before_write(&self, ino: u64) -> WriteStart {
        WriteStart { opened: self.opened.load(Ordering::Acquire), readers: self.has_readers(ino) }
    }

    /// After the write: whether the kernel may have cached pages of the
    /// file while it was on its way (an open for reading lived through part
    /// of it, or was made meanwhile, of any file).
    pub fn may_cache(&self, ino: u64, start: WriteStart) -> bool {
        start.readers || self.has_readers(ino) || self.opened.load(Ordering::Acquire) != start.opened
    }

    /// The engine changed attributes of `ino` that the kernel caches (its
    /// mode, its times): the kernel asks for them again at their next use.
    /// Called for the inode of the request being served, before its reply.
    pub fn attrs_changed(&self, ino: u64) {
        if let Some(n) = self.notifier.get() {
            if let Err(e) = n.inval_inode(INodeNo(ino), -1, 0) {
                tracing::debug!("inode {ino}: invalidating cached attributes: {e}");
            }
        }
    }

    /// Drops the kernel's cached pages of `len` bytes at `offset` (and the
    /// attributes). Waits for pages under I/O: never on a serving thread.
    pub fn drop_pages(&self, ino: u64, offset: u64, len: u64) {
        if let Some(n) = self.notifier.get() {
            let off = offset.min(i64::MAX as u64 - 1);
            let (off, len) = (off as i64, len.clamp(1, i64::MAX as u64 - off) as i64);
            if let Err(e) = n.inval_inode(INodeNo(ino), off, len) {
                tracing::debug!("inode {ino}: invalidating cached pages: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A direct write may leave cached pages behind when a reader of its
    /// file lived through any part of it, or any open for reading was made
    /// meanwhile; not otherwise.
    #[test]
    fn readers_during_a_write_are_seen() {
        let c = Coherence::new(4);
        let s = c.before_write(7);
        assert!(!c.may_cache(7, s), "nobody reads");
        c.reader_opened(7);
        assert!(c.may_cache(7, s), "opened during the write");
        let s = c.before_write(7);
        c.reader_closed(7);
        assert!(c.may_cache(7, s), "open when the write started");
        let s = c.before_write(7);
        assert!(!c.may_cache(7, s), "closed before it");
        c.reader_opened(8);
        c.reader_closed(8);
        assert!(c.may_cache(7, s), "an open and close of any file meanwhile");
        let s = c.before_write(7);
        c.reader_opened(9);
        assert!(c.may_cache(7, s));
        let s = c.before_write(7);
        assert!(!c.may_cache(7, s), "a reader of another file, open throughout");
        c.reader_closed(9);
        c.reader_closed(9);
        assert!(c.readers.iter().all(|s| s.lock().is_empty()));
        // Without a channel the notifications do nothing.
        c.attrs_changed(7);
        c.drop_pages(7, 0, 4096);
    }
}
