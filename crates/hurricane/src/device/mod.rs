//! Devices: the byte stores under a pool (image files, block devices,
//! objects in a Ceph cluster with the `rados` feature, or memory for
//! tests), each with its own I/O statistics.
//!
//! Everything above this module addresses a device in whole `BLOCK_SIZE`
//! blocks; a device never interprets what it stores.

pub mod fault;
mod file;
mod mem;
#[cfg(feature = "rados")]
pub mod rados;
#[cfg(feature = "rados")]
pub mod rados_objects;
pub mod rados_spec;
pub mod sim;
mod stats;

pub use fault::{FaultDevice, FaultPlan, FaultSpec};
pub use file::{FileDevice, IMAGE_MODE};
pub use mem::{CrashMode, MemDevice};
#[cfg(feature = "rados")]
pub use rados::{RadosCluster, RadosDevice, RadosLease, RadosOptions};
pub use rados_spec::{is_rados, PoolLease, RadosConnections, RadosSpec, DEFAULT_LEASE_DURATION, MIN_LEASE_DURATION};
pub use sim::{SimDevice, SimParams};
pub use stats::{DeviceStats, StatsSnapshot};

use crate::error::Result;
use std::sync::Arc;

/// The unit of allocation and I/O for every device and building block.
pub use crate::base::BLOCK_SIZE;
pub const BLOCK_SHIFT: u32 = 12;

/// A byte-addressed store. Implementations must be safe to call from many
/// threads at once; `flush` makes every completed write durable.
pub trait Device: Send + Sync {
    /// Human-readable name (a path, or `mem:N`) used in error messages.
    fn name(&self) -> &str;
    /// Size in bytes.
    fn size(&self) -> u64;
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()>;
    /// A write nothing will read back soon (a rebuild's): where the device
    /// can, it bypasses the host's page cache, so the bytes are neither
    /// copied into the cache nor evict what it holds. Durable at the next
    /// `flush`, as any write. The default is `write_at`.
    fn write_at_uncached(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.write_at(buf, offset)
    }
    /// A read of what the media holds (a scrub's): where the device can,
    /// it bypasses the host's page cache, so the bytes come from the disk,
    /// not a cached copy, and nothing is copied through the cache. The
    /// default is `read_at`.
    fn read_at_uncached(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.read_at(buf, offset)
    }
    fn flush(&self) -> Result<()>;
    /// Gives back space that no longer holds data (e.g. punch a hole in an
    /// image file). Best effort: the default does nothing.
    fn discard(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }
    /// Whether each request costs a wait whatever its size (a disk's seek
    /// and rotation, a cluster's round trip), so that reading a block's
    /// neighbours along with it costs little more than the block alone.
    /// No by default (flash, memory, an image file in the host's cache).
    fn seeks(&self) -> bool {
        false
    }
    /// Whether space the pool frees is given back to this device
    /// (`discard`) as soon as the free is durable: a device whose free
    /// space costs something elsewhere (a Ceph cluster's objects). No by
    /// default: each discard is a request, and an image file's holes
    /// fragment it.
    fn reclaims_freed(&self) -> bool {
        false
    }
    /// The bytes `discard` gives back as one piece (a Ceph cluster's
    /// object), aligned from offset 0: the pool discards a unit it frees
    /// piece by piece whole when its last piece is freed.
    fn discard_unit(&self) -> u64 {
        BLOCK_SIZE as u64
    }
    /// Makes `len` bytes at `offset` read as zeros without writing them,
    /// keeping the space allocated (an image file's `FALLOC_FL_ZERO_RANGE`,
    /// a block device's write-zeroes). `Ok(false)`: not offered here, and
    /// the caller writes the zeros itself.
    fn zero_range(&self, _offset: u64, _len: u64) -> Result<bool> {
        Ok(false)
    }
    /// The device went away for good (its image file was deleted, its
    /// block device removed): every request fails from now on. A handle
    /// that sees an error from a device that says so marks it Missing.
    fn gone(&self) -> bool {
        false
    }
    /// Whether `e`, an error this device returned, may pass by itself with
    /// nothing lost on the device (a device over the network whose server
    /// did not answer in time, a cluster that is full): the request fails,
    /// but the device is not faulted for it and later requests are tried.
    /// What a failed write did not write is the caller's to know (its
    /// error), and redundancy above records the ranges a copy missed.
    fn transient(&self, _e: &crate::Error) -> bool {
        false
    }
    /// Like `gone`, but looks again now where `gone` may give a recent
    /// answer (what `hurricane status` asks).
    fn gone_now(&self) -> bool {
        self.gone()
    }
}

/// Where a device of the pool stands. Kept per handle; how a state is
/// entered and left (degraded open, faults, replace, remove) is the pool's
/// business, what it allows is decided here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum DeviceState {
    /// Present and serving reads and writes.
    Online = 0,
    /// Not there: its file or block device could not be opened, or it went
    /// away while in use. Every request to it fails at once.
    Missing = 1,
    /// There, but failing: too many errors. Every request to it fails at once.
    Faulted = 2,
    /// A replacement being filled from redundancy: writes reach it, reads of
    /// data not rebuilt yet must come from elsewhere, so reads fail at once.
    Resilvering = 3,
    /// Taken out of the pool; its slot stays so device numbers never change.
    Removed = 4,
    /// Being emptied before its removal: it serves the data it still holds,
    /// reads and writes alike, but no new data is placed on it.
    Evacuating = 5,
}

impl DeviceState {
    pub fn name(self) -> &'static str {
        match self {
            DeviceState::Online => "online",
            DeviceState::Missing => "missing",
            DeviceState::Faulted => "faulted",
            DeviceState::Resilvering => "resilvering",
            DeviceState::Removed => "removed",
            DeviceState::Evacuating => "evacuating",
        }
    }
    fn from_u8(v: u8) -> DeviceState {
        match v {
            0 => DeviceState::Online,
            1 => DeviceState::Missing,
            2 => DeviceState::Faulted,
            3 => DeviceState::Resilvering,
            5 => DeviceState::Evacuating,
            _ => DeviceState::Removed,
        }
    }
    /// A state kept in the superblock (`dev_states`): resilvering,
    /// removed or evacuating; anything else is not persistent.
    pub fn from_persistent(v: u8) -> Option<DeviceState> {
        match v {
            3 => Some(DeviceState::Resilvering),
            4 => Some(DeviceState::Removed),
            5 => Some(DeviceState::Evacuating),
            _ => None,
        }
    }
    /// Reads may be served by a device in this state.
    pub fn readable(self) -> bool {
        matches!(self, DeviceState::Online | DeviceState::Evacuating)
    }
    /// Writes may go to a device in this state.
    pub fn writable(self) -> bool {
        matches!(self, DeviceState::Online | DeviceState::Resilvering | DeviceState::Evacuating)
    }
    /// New data may be placed on a device in this state.
    pub fn placeable(self) -> bool {
        matches!(self, DeviceState::Online | DeviceState::Resilvering)
    }
}

impl std::fmt::Display for DeviceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Errors seen on one device since the pool was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ErrorCounts {
    pub read: u64,
    pub write: u64,
    /// Blocks whose data did not match their checksum.
    pub checksum: u64,
}

/// A device slot with nothing behind it: every request fails naming the
/// device. Holds the place of a missing device so device numbers stay put.
pub struct MissingDevice {
    name: String,
    size: u64,
}

impl MissingDevice {
    /// `size`: what the pool's superblocks say the device holds (bytes).
    pub fn new(name: impl Into<String>, size: u64) -> Self {
        MissingDevice { name: name.into(), size }
    }
    fn err(&self) -> crate::Error {
        crate::Error::Device(format!("{} is missing", self.name))
    }
}

impl Device for MissingDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, _buf: &mut [u8], _offset: u64) -> Result<()> {
        Err(self.err())
    }
    fn write_at(&self, _buf: &[u8], _offset: u64) -> Result<()> {
        Err(self.err())
    }
    fn flush(&self) -> Result<()> {
        Err(self.err())
    }
    fn gone(&self) -> bool {
        true
    }
}

/// A device together with its statistics, state and error counts; the
/// handle the rest of the engine holds. The device behind it can be swapped
/// (a replacement takes the slot of the device it replaces).
pub struct DeviceHandle {
    dev: parking_lot::RwLock<Arc<dyn Device>>,
    pub stats: DeviceStats,
    /// Position in the pool (superblock `dev_index`).
    pub index: u32,
    state: std::sync::atomic::AtomicU8,
    read_errors: std::sync::atomic::AtomicU64,
    write_errors: std::sync::atomic::AtomicU64,
    checksum_errors: std::sync::atomic::AtomicU64,
    repaired: std::sync::atomic::AtomicU64,
    /// The NUMA node the device hangs off (`u32::MAX`: unknown).
    numa_node: std::sync::atomic::AtomicU32,
    /// State that a block type keeps for the whole device, shared by the
    /// nodes of every file on it (the `log`'s head and segment table): one
    /// value per type, made on first use.
    shared: parking_lot::Mutex<Vec<Arc<dyn std::any::Any + Send + Sync>>>,
    /// Completed writes since the last flush that the journal must order
    /// before its next record (every write but those made inside
    /// [`verified_by_recovery`]).
    unflushed: std::sync::atomic::AtomicBool,
}

thread_local! {
    static VERIFIED_BY_RECOVERY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the calling thread's device writes exempt from ordered
/// mode: the journal does not flush them before its next record, because
/// that record names them for recovery to verify (a record whose data did
/// not reach the disk is dropped at replay; see `Fs::open`). Writes made by
/// other threads on the caller's behalf are not exempt.
pub fn verified_by_recovery<R>(f: impl FnOnce() -> R) -> R {
    crate::base::with_flag(&VERIFIED_BY_RECOVERY, f)
}

/// Runs `f` with the calling thread's device writes ordered as plain
/// writes even inside [`verified_by_recovery`]: writes made for others
/// (held writes of other files drained by a transaction's commit) are not
/// named by the caller's record, so the journal must flush them first.
pub fn not_verified<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            VERIFIED_BY_RECOVERY.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(VERIFIED_BY_RECOVERY.with(|c| c.replace(false)));
    f()
}

/// Whether the calling thread is inside [`verified_by_recovery`]: its
/// writes belong to a record that recovery verifies (a transaction's
/// commit), not to plain writes.
pub fn in_verified_scope() -> bool {
    VERIFIED_BY_RECOVERY.with(|c| c.get())
}

impl DeviceHandle {
    pub fn new(index: u32, dev: Arc<dyn Device>) -> Self {
        Self::with_state(index, dev, DeviceState::Online)
    }

    pub fn with_state(index: u32, dev: Arc<dyn Device>, state: DeviceState) -> Self {
        DeviceHandle {
            dev: parking_lot::RwLock::new(dev),
            stats: DeviceStats::default(),
            index,
            state: std::sync::atomic::AtomicU8::new(state as u8),
            read_errors: Default::default(),
            write_errors: Default::default(),
            checksum_errors: Default::default(),
            numa_node: std::sync::atomic::AtomicU32::new(u32::MAX),
            repaired: Default::default(),
            shared: Default::default(),
            unflushed: Default::default(),
        }
    }

    /// The device in this slot now.
    pub fn dev(&self) -> Arc<dyn Device> {
        self.dev.read().clone()
    }

    /// Puts another device in this slot (a replacement), returning the old
    /// one. Requests hold the slot for their duration, so this waits for
    /// those in flight: none reaches the old device afterwards.
    pub fn swap(&self, dev: Arc<dyn Device>) -> Arc<dyn Device> {
        std::mem::replace(&mut *self.dev.write(), dev)
    }

    pub fn name(&self) -> String {
        self.dev.read().name().to_string()
    }

    /// The NUMA node the device hangs off, where known.
    pub fn numa_node(&self) -> Option<u32> {
        Some(self.numa_node.load(std::sync::atomic::Ordering::Relaxed)).filter(|&n| n != u32::MAX)
    }

    /// Records the device's NUMA node (`None`: unknown).
    pub fn set_numa_node(&self, node: Option<u32>) {
        self.numa_node.store(node.unwrap_or(u32::MAX), std::sync::atomic::Ordering::Relaxed);
    }

    pub fn state(&self) -> DeviceState {
        DeviceState::from_u8(self.state.load(std::sync::atomic::Ordering::Acquire))
    }

    pub fn set_state(&self, s: DeviceState) {
        let old = DeviceState::from_u8(self.state.swap(s as u8, std::sync::atomic::Ordering::AcqRel));
        if old != s {
            tracing::warn!(device = self.index, name = %self.name(), from = %old, to = %s, "device state changed");
        }
    }

    /// Puts the slot in the state the pool's superblock records for it, as
    /// the pool opens (not a change worth a warning).
    pub fn restore_state(&self, s: DeviceState) {
        self.state.store(s as u8, std::sync::atomic::Ordering::Release);
        tracing::debug!(device = self.index, name = %self.name(), state = %s, "device state restored");
    }

    pub fn errors(&self) -> ErrorCounts {
        use std::sync::atomic::Ordering::Relaxed;
        ErrorCounts {
            read: self.read_errors.load(Relaxed),
            write: self.write_errors.load(Relaxed),
            checksum: self.checksum_errors.load(Relaxed),
        }
    }

    /// Counts `blocks` blocks whose data failed their checksum.
    pub fn count_checksum_errors(&self, blocks: u64) {
        self.checksum_errors.fetch_add(blocks, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts blocks rewritten on this device from redundancy (self-heal
    /// on read, scrub, resync).
    pub fn count_repaired(&self, blocks: u64) {
        self.repaired.fetch_add(blocks, std::sync::atomic::Ordering::Relaxed);
    }

    /// Blocks rewritten on this device from redundancy since the pool was opened.
    pub fn repaired(&self) -> u64 {
        self.repaired.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn blocks(&self) -> u64 {
        self.dev.read().size() >> BLOCK_SHIFT
    }

    /// Fails at once, naming the device and its state, unless reads may be
    /// served by it.
    pub fn check_readable(&self) -> Result<()> {
        let st = self.state();
        if st.readable() {
            return Ok(());
        }
        Err(crate::Error::Device(format!("{} ({}) is {st}", self.index, self.name())))
    }

    /// Fails at once, naming the device and its state, unless writes may go
    /// to it. Space is never allocated on a device that fails this.
    pub fn check_writable(&self) -> Result<()> {
        let st = self.state();
        if st.writable() {
            return Ok(());
        }
        Err(crate::Error::Device(format!("{} ({}) is {st}", self.index, self.name())))
    }

    /// What an error from the device means for its state: a device that
    /// says it is gone is Missing; a failed write or flush makes it Faulted
    /// (data that should be on it is not, so it must not serve reads until
    /// it is resilvered), unless the device says the error may pass
    /// ([`Device::transient`]); a failed read is only counted (the redundancy
    /// above heals it, and a device with some bad sectors still holds the
    /// rest of its data).
    fn failed(&self, dev: &dyn Device, write: bool, e: &crate::Error) {
        let cur = self.state();
        if write && dev.transient(e) {
            tracing::debug!(device = self.index, "write failed, not faulted (the cause may pass): {e}");
            return;
        }
        if dev.gone() {
            if cur != DeviceState::Removed {
                self.set_state(DeviceState::Missing);
            }
        } else if write && cur.writable() {
            self.set_state(DeviceState::Faulted);
        }
    }

    pub fn read_blocks(&self, blk: u64, buf: &mut [u8]) -> Result<()> {
        self.check_readable()?;
        let _g = self.stats.begin();
        let dev = self.dev.read();
        self.check(&**dev, blk, buf.len())?;
        let r = if crate::base::reads_from_media() {
            dev.read_at_uncached(buf, blk << BLOCK_SHIFT)
        } else {
            dev.read_at(buf, blk << BLOCK_SHIFT)
        };
        if let Err(e) = r {
            self.read_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.failed(&**dev, false, &e);
            return Err(e);
        }
        self.stats.read(buf.len());
        Ok(())
    }

    /// Writes whole blocks. A device being resilvered is written past the
    /// host's page cache ([`Device::write_at_uncached`]): nothing reads it
    /// until the rebuild is done, and a rebuild writes all it holds.
    pub fn write_blocks(&self, blk: u64, buf: &[u8]) -> Result<()> {
        self.check_writable()?;
        let _g = self.stats.begin();
        let dev = self.dev.read();
        self.check(&**dev, blk, buf.len())?;
        let r = if self.state() == DeviceState::Resilvering {
            dev.write_at_uncached(buf, blk << BLOCK_SHIFT)
        } else {
            dev.write_at(buf, blk << BLOCK_SHIFT)
        };
        if let Err(e) = r {
            self.write_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.failed(&**dev, true, &e);
            return Err(e);
        }
        self.stats.write(buf.len());
        self.note_written();
        Ok(())
    }

    /// Blocks [blk, blk+n) read as zeros afterwards: zeroed by the device
    /// where it can (no data written, so not counted as written bytes),
    /// written with zeros where it cannot.
    pub fn zero_blocks(&self, blk: u64, n: u64) -> Result<()> {
        const CHUNK: u64 = 256;
        let len = n << BLOCK_SHIFT;
        self.check_writable()?;
        {
            let _g = self.stats.begin();
            let dev = self.dev.read();
            self.check(&**dev, blk, len as usize)?;
            match dev.zero_range(blk << BLOCK_SHIFT, len) {
                Ok(true) => {
                    self.note_written();
                    return Ok(());
                }
                Ok(false) => {}
                Err(e) => {
                    self.write_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.failed(&**dev, true, &e);
                    return Err(e);
                }
            }
        }
        let zeros = vec![0u8; (CHUNK.min(n) as usize) << BLOCK_SHIFT];
        let mut b = blk;
        while b < blk + n {
            let k = CHUNK.min(blk + n - b);
            self.write_blocks(b, &zeros[..(k as usize) << BLOCK_SHIFT])?;
            b += k;
        }
        Ok(())
    }

    /// A write completed: unless recovery verifies it, the journal's next
    /// record waits for a flush of this device.
    fn note_written(&self) {
        if !VERIFIED_BY_RECOVERY.with(|c| c.get()) {
            self.unflushed.store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// Whether writes that ordered mode must flush before the journal's
    /// next record completed since the last flush.
    pub fn has_unflushed(&self) -> bool {
        self.unflushed.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The device-wide state of type `T` block types keep here, made by
    /// `make` on first use.
    pub fn shared<T: std::any::Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Arc<T> {
        let mut v = self.shared.lock();
        if let Some(t) = v.iter().find_map(|x| x.clone().downcast::<T>().ok()) {
            return t;
        }
        let t = Arc::new(make());
        v.push(t.clone());
        t
    }

    /// The device-wide state of type `T`, if a block type made it.
    pub fn shared_if<T: std::any::Any + Send + Sync>(&self) -> Option<Arc<T>> {
        self.shared.lock().iter().find_map(|x| x.clone().downcast::<T>().ok())
    }

    /// Makes the device's completed writes durable. Fails at once on a
    /// device that takes no writes; a failed flush makes it Faulted (or
    /// Missing, if it is gone).
    pub fn flush(&self) -> Result<()> {
        self.check_writable()?;
        self.stats.flush();
        let dev = self.dev();
        // Cleared before the flush: a write that completes from here on is
        // either covered by it or marks the device again.
        let was = self.unflushed.swap(false, std::sync::atomic::Ordering::AcqRel);
        if let Err(e) = dev.flush() {
            self.unflushed.fetch_or(was, std::sync::atomic::Ordering::AcqRel);
            self.write_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.failed(&*dev, true, &e);
            return Err(e);
        }
        Ok(())
    }

    fn check(&self, dev: &dyn Device, blk: u64, len: usize) -> Result<()> {
        let end = blk.checked_mul(BLOCK_SIZE as u64).and_then(|o| o.checked_add(len as u64));
        match end {
            Some(e) if e <= dev.size() => Ok(()),
            _ => Err(crate::Error::Device(format!(
                "{}: access to block {} (+{} bytes) past the end ({} bytes)",
                dev.name(),
                blk,
                len,
                dev.size()
            ))),
        }
    }
}
