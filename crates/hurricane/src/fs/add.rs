//! Growing the pool by a device (`hurricane device add`), open or not.
//!
//! The new device takes the next device number. Under the meta-data lock
//! (so no commit or checkpoint interleaves):
//!
//! 1. the new device gets the pool's current superblock with the device
//!    count one higher and the generation one higher, and its other slot
//!    is cleared of anything an earlier use left;
//! 2. the pool directory's `pool.conf` lists it (a temporary file renamed
//!    over the old one);
//! 3. it takes its slot in the open pool, online, and every device gets the
//!    new superblock.
//!
//! The superblock of step 1 is the commit point: it is the newest, so an
//! open that finds it (through `pool.conf`) takes the larger count, and
//! devices whose superblocks the crash left one generation behind are
//! accepted as such (`pool::identify`). A crash before step 2 leaves a
//! device `pool.conf` does not name: the pool opens as before, and adding
//! the device again starts over. Nothing is placed on the device before
//! step 3, and what is placed on it afterwards reaches the journal only
//! through commits, which wait for the lock.

use super::Fs;
use crate::device::{Device, DeviceHandle, BLOCK_SIZE};
use crate::error::{Error, Result};
use crate::pool::{self, Allocator, Superblock, MAX_DEVICES, RESERVED_BLOCKS};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const BS: u64 = BLOCK_SIZE as u64;
/// The smallest device the pool takes: its superblocks and some room.
pub const MIN_DEVICE_BLOCKS: u64 = RESERVED_BLOCKS + 64;

/// Where an added device is recorded.
#[derive(Debug, Clone, Default)]
pub struct AddOptions {
    /// The pool directory whose `pool.conf` gets the new device's line.
    pub pool_dir: Option<PathBuf>,
    /// What `pool.conf` calls the new device.
    pub path: Option<PathBuf>,
}

impl Fs {
    /// Adds `dev` to the pool as its next device (see the module notes);
    /// returns its device number.
    pub fn add_device(&self, dev: Arc<dyn Device>, opts: &AddOptions) -> Result<u32> {
        self.check_writable()?;
        if dev.size() < MIN_DEVICE_BLOCKS * BS {
            return Err(Error::Device(format!(
                "{}: too small: {} bytes, a device needs at least {} bytes",
                dev.name(),
                dev.size(),
                MIN_DEVICE_BLOCKS * BS
            )));
        }
        let mut m = self.inner.meta.lock();
        refuse_member(&*dev, &m.sb)?;
        let index = self.storage().device_count();
        if index >= MAX_DEVICES {
            return Err(Error::Invalid(format!("the pool already has {index} devices, the most it can have")));
        }
        let mut sb = m.sb.clone();
        sb.generation += 1;
        sb.dev_count = index + 1;
        // 1. The commit point.
        claim_new_device(&*dev, &sb, index)?;
        // 2. The pool's device list.
        if let (Some(dir), Some(p)) = (&opts.pool_dir, &opts.path) {
            add_device_path(dir, p)?;
            // A pool's first device in a Ceph cluster names it there.
            pool::published::name_after_add(dir, &sb.pool_id)?;
        }
        // 3. The slot, then every superblock. What the open pool holds in
        // memory matches the device's superblock from here on, whatever the
        // other devices' writes do.
        let blocks = dev.size() / BS;
        self.storage().allocs.push(Allocator::new(RESERVED_BLOCKS, blocks));
        self.storage().devs.push(DeviceHandle::new(index, dev.clone()));
        let r = self.storage().write_superblocks(&sb);
        m.sb = sb;
        r?;
        tracing::info!("device {index} ({}) added: {} bytes", dev.name(), blocks * BS);
        Ok(index)
    }
}

/// Refuses a device that already is one of this pool's.
fn refuse_member(dev: &dyn Device, sb: &Superblock) -> Result<()> {
    let mut buf = vec![0u8; BLOCK_SIZE];
    for slot in 0..RESERVED_BLOCKS {
        dev.read_at(&mut buf, slot * BS)?;
        if let Ok(Some(other)) = Superblock::decode(&buf, dev.name()) {
            if other.pool_id == sb.pool_id && other.dev_index < sb.dev_count {
                return Err(Error::Invalid(format!("{}: already device {} of this pool", dev.name(), other.dev_index)));
            }
        }
    }
    Ok(())
}

/// Writes `sb` as device `index`'s superblock on a device joining the pool,
/// clears its other slot, and flushes.
fn claim_new_device(dev: &dyn Device, sb: &Superblock, index: u32) -> Result<()> {
    let mut s = sb.clone();
    s.dev_index = index;
    s.dev_blocks = dev.size() / BS;
    dev.write_at(&vec![0u8; BLOCK_SIZE], ((sb.generation + 1) % 2) * BS)?;
    dev.write_at(&s.encode()?, (sb.generation % 2) * BS)?;
    dev.flush()
}

/// Appends a device line to `pool.conf` (a temporary file renamed over it,
/// so a crash leaves the old list or the new one).
pub fn add_device_path(dir: &Path, path: &Path) -> Result<()> {
    let f = dir.join(pool::POOL_FILE);
    let mut text = pool::read_pool_text(dir).map_err(|e| Error::io(f.display().to_string(), e))?;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let rel = path.strip_prefix(dir).unwrap_or(path);
    // Device lines are in device order: the new one goes after the last.
    let lines: Vec<&str> = text.lines().collect();
    let last = lines.iter().rposition(|l| pool::is_device_line(l.trim()));
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate() {
        out.push_str(l);
        out.push('\n');
        if Some(i) == last {
            out.push_str(&format!("device = {}\n", rel.display()));
        }
    }
    if last.is_none() {
        out.push_str(&format!("device = {}\n", rel.display()));
    }
    pool::replace_pool_file(dir, &out)
}
