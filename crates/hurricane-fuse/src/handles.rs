//! The table of open files: the handle number the kernel hands back with
//! every request on a descriptor names one entry here, and an entry names
//! the inode it was opened on.
//!
//! A handle number is `id << FLAG_BITS | flags`: a 60-bit id that is never
//! given to a second open while the first is live (the counter would take
//! centuries to wrap, and an id still in the table is skipped), and the
//! open's access mode and O_APPEND in the low bits. Every use of a handle
//! names the inode the request is for; a handle that is not in the table,
//! or belongs to another inode, is refused with EBADF and never reaches
//! another file's instance.
//!
//! The table also counts each inode's read-write opens: only through one
//! of those can a program map a file writable and dirty pages in the
//! kernel that have not reached the mount (`mappable_writes`).

use crossbeam_utils::CachePadded;
use fuser::{Errno, FileHandle};
use hurricane::open::OpenFile;
use parking_lot::Mutex;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Low bits of a handle number: access mode (2 bits), O_APPEND, and a mark
/// that tells our handles from zero.
const FLAG_BITS: u32 = 4;
const APPEND_BIT: u64 = 1 << 2;
const MARK_BIT: u64 = 1 << 3;
/// Largest id (60 bits).
pub(crate) const MAX_ID: u64 = u64::MAX >> FLAG_BITS;

/// One open of a file.
pub(crate) struct Open {
    pub ino: u64,
    /// The open-file building blocks (prefetch policy) of an open for
    /// reading; without one the engine's hold on the inode is counted by
    /// `Fs::open_inode` and given back at release.
    pub file: Option<OpenFile>,
}

type Shard = CachePadded<Mutex<HashMap<u64, Open>>>;
/// Read-write opens by inode.
type Counts = CachePadded<Mutex<HashMap<u64, u32>>>;

/// Live opens by id, sharded by id so opens and releases on different
/// threads rarely meet on one lock.
pub(crate) struct Handles {
    shards: Box<[Shard]>,
    next: AtomicU64,
    /// Live read-write opens by inode, sharded by inode.
    read_write: Box<[Counts]>,
}

/// The open flags kept in a handle number.
fn flag_bits(flags: i32) -> u64 {
    let mut b = (flags & libc::O_ACCMODE) as u64 & 3;
    if flags & libc::O_APPEND != 0 {
        b |= APPEND_BIT;
    }
    b | MARK_BIT
}

/// A handle that names no open (directories: their handles carry nothing).
pub(crate) fn plain(flags: i32) -> FileHandle {
    FileHandle(flag_bits(flags))
}

/// Whether a handle was opened for writing.
pub(crate) fn writable(fh: FileHandle) -> bool {
    fh.0 & MARK_BIT != 0 && (fh.0 & 3) as i32 != libc::O_RDONLY
}

/// Whether a handle was opened for reading (or read-write).
pub(crate) fn readable(fh: FileHandle) -> bool {
    fh.0 & MARK_BIT != 0 && (fh.0 & 3) as i32 != libc::O_WRONLY
}

/// Whether a handle was opened read-write.
fn read_write(fh: FileHandle) -> bool {
    fh.0 & MARK_BIT != 0 && (fh.0 & 3) as i32 == libc::O_RDWR
}

fn id_of(fh: FileHandle) -> Option<u64> {
    let id = fh.0 >> FLAG_BITS;
    (fh.0 & MARK_BIT != 0 && id != 0).then_some(id)
}

impl Handles {
    #[cfg(test)]
    pub fn new(shards: usize) -> Handles {
        Handles::starting_at(shards, 1)
    }

    /// A table whose first id is `first` (tests start it near the wrap).
    pub fn starting_at(shards: usize, first: u64) -> Handles {
        Handles {
            shards: (0..shards.max(1)).map(|_| CachePadded::new(Mutex::new(HashMap::new()))).collect(),
            next: AtomicU64::new(first),
            read_write: (0..shards.max(1)).map(|_| CachePadded::new(Mutex::new(HashMap::new()))).collect(),
        }
    }

    fn read_write_of(&self, ino: u64) -> &Mutex<HashMap<u64, u32>> {
        &self.read_write[(ino % self.read_write.len() as u64) as usize]
    }

    /// Whether `ino` has a live read-write open: a shared writable mapping
    /// of it may hold pages the kernel has not written back.
    pub fn mappable_writes(&self, ino: u64) -> bool {
        self.read_write_of(ino).lock().contains_key(&ino)
    }

    fn shard(&self, id: u64) -> &Mutex<HashMap<u64, Open>> {
        &self.shards[(id % self.shards.len() as u64) as usize]
    }

    /// Records an open of `ino`; returns its handle. The id is one no live
    /// open holds.
    pub fn insert(&self, ino: u64, flags: i32, file: Option<OpenFile>) -> FileHandle {
        let open = Open { ino, file };
        loop {
            let id = self.next.fetch_add(1, Ordering::Relaxed) & MAX_ID;
            if id == 0 {
                continue;
            }
            match self.shard(id).lock().entry(id) {
                Entry::Vacant(v) => {
                    v.insert(open);
                    let fh = FileHandle(id << FLAG_BITS | flag_bits(flags));
                    if read_write(fh) {
                        *self.read_write_of(ino).lock().entry(ino).or_insert(0) += 1;
                    }
                    return fh;
                }
                // Still open since the counter last passed here: skip it.
                Entry::Occupied(_) => {}
            }
        }
    }

    /// The open instance of a handle on `ino` (None for an open without
    /// one); EBADF if the handle is not a live open of `ino`.
    pub fn file(&self, fh: FileHandle, ino: u64) -> Result<Option<OpenFile>, Errno> {
        let id = id_of(fh).ok_or(Errno::EBADF)?;
        match self.shard(id).lock().get(&id) {
            Some(o) if o.ino == ino => Ok(o.file.clone()),
            _ => Err(Errno::EBADF),
        }
    }

    /// Whether `fh` is a live open of `ino` for writing.
    pub fn writable_on(&self, fh: FileHandle, ino: u64) -> bool {
        writable(fh) && self.file(fh, ino).is_ok()
    }

    /// Takes a handle's open out of the table; EBADF (and the table
    /// unchanged) if the handle is not a live open of `ino`.
    pub fn remove(&self, fh: FileHandle, ino: u64) -> Result<Open, Errno> {
        let id = id_of(fh).ok_or(Errno::EBADF)?;
        let open = match self.shard(id).lock().entry(id) {
            Entry::Occupied(o) if o.get().ino == ino => o.remove(),
            _ => return Err(Errno::EBADF),
        };
        if read_write(fh) {
            if let Entry::Occupied(mut n) = self.read_write_of(ino).lock().entry(ino) {
                *n.get_mut() -= 1;
                if *n.get() == 0 {
                    n.remove();
                }
            }
        }
        Ok(open)
    }

    /// How many opens are live.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_round_trip() {
        assert!(writable(plain(libc::O_RDWR | libc::O_APPEND)));
        assert!(writable(plain(libc::O_WRONLY)));
        assert!(!writable(plain(libc::O_RDONLY)));
        assert!(readable(plain(libc::O_RDONLY)) && readable(plain(libc::O_RDWR)));
        assert!(!readable(plain(libc::O_WRONLY)) && !readable(FileHandle(0)));
        assert!(!writable(FileHandle(libc::O_WRONLY as u64)), "not one of ours");
        let t = Handles::new(4);
        let fh = t.insert(7, libc::O_WRONLY | libc::O_APPEND, None);
        assert!(writable(fh) && fh.0 & APPEND_BIT != 0);
        assert!(t.writable_on(fh, 7));
        assert!(!t.writable_on(fh, 8), "a handle of another inode");
    }

    /// An inode has mappable writes while a read-write open of it lives,
    /// and only then: write-only and read-only opens cannot map it
    /// writable, and a refused release changes nothing.
    #[test]
    fn read_write_opens_are_counted_per_inode() {
        let t = Handles::new(4);
        let ro = t.insert(7, libc::O_RDONLY, None);
        let wo = t.insert(7, libc::O_WRONLY | libc::O_APPEND, None);
        assert!(!t.mappable_writes(7));
        let a = t.insert(7, libc::O_RDWR, None);
        let b = t.insert(7, libc::O_RDWR | libc::O_APPEND, None);
        let other = t.insert(11, libc::O_RDWR, None);
        assert!(t.mappable_writes(7) && t.mappable_writes(11) && !t.mappable_writes(15));
        assert!(t.remove(a, 11).is_err(), "a handle of another inode");
        t.remove(a, 7).unwrap();
        assert!(t.remove(a, 7).is_err(), "released twice");
        assert!(t.mappable_writes(7), "one read-write open is left");
        t.remove(b, 7).unwrap();
        assert!(!t.mappable_writes(7) && t.mappable_writes(11));
        t.remove(ro, 7).unwrap();
        t.remove(wo, 7).unwrap();
        t.remove(other, 11).unwrap();
        assert!(!t.mappable_writes(11));
        assert!(t.read_write.iter().all(|s| s.lock().is_empty()));
    }

    /// After the id counter wraps, an old handle still reaches only its own
    /// open, a new open never takes a live id, and a release names the
    /// right open or none.
    #[test]
    fn ids_never_wrap_into_a_live_handle() {
        let t = Handles::starting_at(8, MAX_ID - 2);
        // Opens of file 10 (held), then enough of file 20 to wrap past it.
        let old = t.insert(10, libc::O_RDONLY, None);
        let mut newer = Vec::new();
        for _ in 0..8 {
            newer.push(t.insert(20, libc::O_RDONLY, None));
        }
        // Wrap again onto every id in use: each is skipped.
        t.next.store(id_of(old).unwrap(), Ordering::Relaxed);
        newer.push(t.insert(30, libc::O_RDONLY, None));
        let mut ids: Vec<u64> = newer.iter().chain([&old]).map(|&fh| id_of(fh).unwrap()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), newer.len() + 1, "a live id was handed out twice");
        assert_eq!(t.len(), newer.len() + 1, "an insert replaced a live open");
        // The old handle reaches its own inode only.
        assert!(t.file(old, 10).is_ok());
        assert_eq!(t.file(old, 20).err(), Some(Errno::EBADF));
        assert_eq!(t.file(old, 30).err(), Some(Errno::EBADF));
        for &fh in &newer {
            assert_eq!(t.file(fh, 10).err(), Some(Errno::EBADF));
        }
        // A release for another inode drops nothing.
        assert_eq!(t.remove(old, 20).err(), Some(Errno::EBADF));
        assert_eq!(t.remove(newer[0], 10).err(), Some(Errno::EBADF));
        assert_eq!(t.len(), newer.len() + 1);
        assert_eq!(t.remove(old, 10).map(|o| o.ino).ok(), Some(10));
        assert_eq!(t.remove(old, 10).err(), Some(Errno::EBADF), "released twice");
        assert_eq!(t.file(FileHandle(0), 10).err(), Some(Errno::EBADF));
    }
}
