//! The pool: its devices, their allocators, superblocks, and how a pool is
//! made (`mkfs`) and opened.

pub mod alloc;

pub use alloc::Allocator;

use crate::device::DeviceHandle;

/// The devices of an open pool and their allocators, indexed by device number.
/// Building blocks reach device space only through this.
pub struct Storage {
    pub devs: Vec<DeviceHandle>,
    pub allocs: Vec<Allocator>,
}

impl Storage {
    pub fn device_count(&self) -> u32 {
        self.devs.len() as u32
    }
}
