//! Plain values shared by the storage layers: inode numbers, the block size,
//! and where the journal lives and how far it has been written; and the
//! per-thread flag set for the length of a call that two layers use
//! ([`with_flag`]). This module
//! depends on nothing else in the crate, so `device`, `pool`, `journal`,
//! `cache`, `blocks` and `layout` can all use it without depending on each
//! other (the order is checked by `tests::module_order` in `lib.rs`).

/// An inode number.
pub type Ino = u64;

/// Size of a block in bytes: the unit of every device request and of a
/// file's block numbers.
pub const BLOCK_SIZE: usize = 4096;

/// Where the journal lives: blocks [start, start+blocks) of device `dev`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub dev: u32,
    pub start: u64,
    pub blocks: u64,
}

/// The append position of the circular journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// Block offset (within the region) of the oldest record still needed.
    pub tail: u64,
    /// Block offset where the next record goes.
    pub head: u64,
    /// Sequence number of the next record.
    pub seq: u64,
}

impl Cursor {
    pub fn used(&self, r: &Region) -> u64 {
        (self.head + r.blocks - self.tail) % r.blocks
    }
}

thread_local! {
    static FROM_MEDIA: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the device reads of the calling thread, and of the
/// helpers it starts (`helpers::scope` carries the flag over), made from
/// the media where a device can: past the host's page cache, so a scrub
/// verifies what the disks hold, not a cached copy, and copies nothing
/// through the cache (`Device::read_at_uncached`).
pub fn from_media<R>(f: impl FnOnce() -> R) -> R {
    with_flag(&FROM_MEDIA, f)
}

/// Whether the calling thread is inside [`from_media`].
pub fn reads_from_media() -> bool {
    FROM_MEDIA.with(|c| c.get())
}

/// Runs `f` with the per-thread flag `key` set, and puts back what it was
/// afterwards (on a panic too).
pub fn with_flag<R>(key: &'static std::thread::LocalKey<std::cell::Cell<bool>>, f: impl FnOnce() -> R) -> R {
    struct Reset(&'static std::thread::LocalKey<std::cell::Cell<bool>>, bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _reset = Reset(key, key.with(|c| c.replace(true)));
    f()
}
