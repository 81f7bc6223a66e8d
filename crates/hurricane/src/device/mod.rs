//! Devices: the byte stores under a pool (image files, block devices, or
//! memory for tests), each with its own I/O statistics.
//!
//! Everything above this module addresses a device in whole `BLOCK_SIZE`
//! blocks; a device never interprets what it stores.

mod file;
mod mem;
pub mod sim;
mod stats;

pub use file::FileDevice;
pub use mem::{CrashMode, MemDevice, MemDeviceState};
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
    fn flush(&self) -> Result<()>;
    /// Gives back space that no longer holds data (e.g. punch a hole in an
    /// image file). Best effort: the default does nothing.
    fn discard(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }
}

/// A device together with its statistics; the handle the rest of the engine holds.
pub struct DeviceHandle {
    pub dev: Arc<dyn Device>,
    pub stats: DeviceStats,
    /// Position in the pool (superblock `dev_index`).
    pub index: u32,
}

impl DeviceHandle {
    pub fn new(index: u32, dev: Arc<dyn Device>) -> Self {
        DeviceHandle { dev, stats: DeviceStats::default(), index }
    }

    pub fn blocks(&self) -> u64 {
        self.dev.size() >> BLOCK_SHIFT
    }

    pub fn read_blocks(&self, blk: u64, buf: &mut [u8]) -> Result<()> {
        let _g = self.stats.begin();
        self.check(blk, buf.len())?;
        self.dev.read_at(buf, blk << BLOCK_SHIFT)?;
        self.stats.read(buf.len());
        Ok(())
    }

    pub fn write_blocks(&self, blk: u64, buf: &[u8]) -> Result<()> {
        let _g = self.stats.begin();
        self.check(blk, buf.len())?;
        self.dev.write_at(buf, blk << BLOCK_SHIFT)?;
        self.stats.write(buf.len());
        Ok(())
    }

    pub fn flush(&self) -> Result<()> {
        self.stats.flush();
        self.dev.flush()
    }

    fn check(&self, blk: u64, len: usize) -> Result<()> {
        let end = blk.checked_mul(BLOCK_SIZE as u64).and_then(|o| o.checked_add(len as u64));
        match end {
            Some(e) if e <= self.dev.size() => Ok(()),
            _ => Err(crate::Error::Device(format!(
                "{}: access to block {} (+{} bytes) past the end ({} bytes)",
                self.dev.name(),
                blk,
                len,
                self.dev.size()
            ))),
        }
    }
}
