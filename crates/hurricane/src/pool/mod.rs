//! The pool: its devices, their allocators and superblocks, how a pool
//! directory names its devices, and the identity checks made on open.

pub mod alloc;
pub mod superblock;

pub use alloc::Allocator;
pub use superblock::{Superblock, FORMAT_VERSION, MAX_COUNTER, MAX_DEVICES, OLDEST_READABLE, RESERVED_BLOCKS};

use crate::device::{Device, DeviceHandle, FileDevice, BLOCK_SIZE};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

    /// Makes every completed write on every device durable.
    pub fn flush_all(&self) -> Result<()> {
        // Devices are independent: flush them in parallel.
        if self.devs.len() == 1 {
            return self.devs[0].flush();
        }
        std::thread::scope(|s| {
            let hs: Vec<_> = self.devs.iter().map(|d| s.spawn(move || d.flush())).collect();
            hs.into_iter()
                .try_for_each(|h| h.join().unwrap_or_else(|_| Err(Error::Device("flush thread failed".into()))))
        })
    }

    /// Writes the superblock to every device (slot `generation % 2`) and
    /// flushes each.
    pub fn write_superblocks(&self, sb: &Superblock) -> Result<()> {
        for d in &self.devs {
            let mut s = sb.clone();
            s.dev_index = d.index;
            s.dev_blocks = d.blocks();
            let b = s.encode()?;
            d.write_blocks(sb.generation % 2, &b)?;
        }
        self.flush_all()
    }
}

/// The file in a pool directory that lists its devices, one path a line.
pub const POOL_FILE: &str = "pool.conf";

/// Device paths of a pool directory.
pub fn device_paths(dir: &Path) -> Result<Vec<PathBuf>> {
    let f = dir.join(POOL_FILE);
    let text = std::fs::read_to_string(&f).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::NotFound(format!("{} (not a Hurricane pool directory: no {POOL_FILE})", dir.display()))
        } else {
            Error::io(f.display().to_string(), e)
        }
    })?;
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || sim_line(line).is_some() {
            continue;
        }
        let p = line.strip_prefix("device").map(|r| r.trim_start().trim_start_matches('=').trim()).unwrap_or(line);
        let p = PathBuf::from(p);
        out.push(if p.is_absolute() { p } else { dir.join(p) });
    }
    if out.is_empty() {
        return Err(Error::Device(format!("{}: lists no devices", f.display())));
    }
    Ok(out)
}

/// The value of a `sim = SPEC` line.
fn sim_line(line: &str) -> Option<&str> {
    line.strip_prefix("sim")?.trim_start().strip_prefix('=').map(str::trim)
}

/// The disk simulator a pool directory asks for (`sim = hdd...` in
/// pool.conf, written by `mkfs --sim`): `Fs::open_dir` wraps every device
/// in a [`crate::device::SimDevice`] with it.
pub fn sim_params(dir: &Path) -> Result<Option<crate::device::SimParams>> {
    let f = dir.join(POOL_FILE);
    let text = std::fs::read_to_string(&f).map_err(|e| Error::io(f.display().to_string(), e))?;
    let mut found = None;
    for line in text.lines().map(str::trim) {
        if let Some(spec) = sim_line(line) {
            found =
                crate::device::SimParams::parse(spec).map_err(|e| Error::Invalid(format!("{}: {e}", f.display())))?;
        }
    }
    Ok(found)
}

/// Records (or with `None` removes) the disk simulator of a pool directory.
pub fn set_sim(dir: &Path, p: Option<&crate::device::SimParams>) -> Result<()> {
    let f = dir.join(POOL_FILE);
    let text = std::fs::read_to_string(&f).map_err(|e| Error::io(f.display().to_string(), e))?;
    const NOTE: &str = "# timing of a simulated disk on every device (see device::sim)";
    let mut out: String =
        text.lines().filter(|l| sim_line(l.trim()).is_none() && l.trim() != NOTE).map(|l| format!("{l}\n")).collect();
    if let Some(p) = p {
        out.push_str(&format!("{NOTE}\nsim = {p}\n"));
    }
    std::fs::write(&f, out).map_err(|e| Error::io(f.display().to_string(), e))
}

/// Writes the pool directory's device list.
pub fn write_pool_file(dir: &Path, paths: &[PathBuf]) -> Result<()> {
    let mut s = String::from("# Hurricane pool: one device a line, in device order\n");
    for p in paths {
        let rel = p.strip_prefix(dir).unwrap_or(p);
        s.push_str(&format!("device = {}\n", rel.display()));
    }
    let f = dir.join(POOL_FILE);
    std::fs::write(&f, s).map_err(|e| Error::io(f.display().to_string(), e))
}

/// Opens the named device files, naming any that is missing.
pub fn open_paths(paths: &[PathBuf], writable: bool) -> Result<Vec<Arc<dyn Device>>> {
    paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if !p.exists() {
                return Err(Error::Device(format!("{i} ({}) is missing", p.display())));
            }
            Ok(Arc::new(FileDevice::open(p, writable)?) as Arc<dyn Device>)
        })
        .collect()
}

/// Reads and cross-checks the superblocks of `devs`; returns the newest
/// valid superblock and the devices ordered by their index. Refuses foreign,
/// duplicated, missing and newer-format devices, naming them.
pub fn identify(devs: Vec<Arc<dyn Device>>) -> Result<(Superblock, Vec<DeviceHandle>)> {
    let mut found: Vec<(Superblock, Arc<dyn Device>)> = Vec::new();
    for dev in devs {
        if dev.size() < (RESERVED_BLOCKS * BLOCK_SIZE as u64) {
            return Err(Error::Device(format!(
                "{}: too small to be a Hurricane device ({} bytes)",
                dev.name(),
                dev.size()
            )));
        }
        let mut best: Option<Superblock> = None;
        let mut errs = Vec::new();
        let mut buf = vec![0u8; BLOCK_SIZE];
        for slot in 0..RESERVED_BLOCKS {
            dev.read_at(&mut buf, slot * BLOCK_SIZE as u64)?;
            match Superblock::decode(&buf, dev.name()) {
                Ok(Some(sb)) => {
                    if best.as_ref().is_none_or(|b| sb.generation > b.generation) {
                        best = Some(sb);
                    }
                }
                Ok(None) => {}
                Err(e @ Error::Device(_)) => return Err(e),
                Err(e) => errs.push(e.to_string()),
            }
        }
        let sb = match best {
            Some(sb) => sb,
            None if errs.is_empty() => {
                return Err(Error::Device(format!("{}: not a Hurricane device (no superblock)", dev.name())));
            }
            None => return Err(Error::Device(format!("{}: no valid superblock ({})", dev.name(), errs.join("; ")))),
        };
        // `decode` holds dev_blocks to what fits in a byte count.
        let expect = sb.dev_blocks.saturating_mul(BLOCK_SIZE as u64);
        if dev.size() < expect {
            return Err(Error::Device(format!(
                "{}: truncated: {} bytes, its superblock says {} bytes",
                dev.name(),
                dev.size(),
                expect
            )));
        }
        found.push((sb, dev));
    }
    let first = found.first().ok_or_else(|| Error::Device("no devices given".into()))?.0.clone();
    let count = first.dev_count;
    // Indexed by device number; sized by the devices given, never by the
    // count a superblock claims.
    let mut slots: std::collections::BTreeMap<u32, (Superblock, Arc<dyn Device>)> = Default::default();
    for (sb, dev) in found {
        if sb.pool_id != first.pool_id {
            return Err(Error::Device(format!("{}: belongs to another pool", dev.name())));
        }
        if sb.dev_count != count {
            return Err(Error::Device(format!(
                "{}: says the pool has {} devices, another says {count}",
                dev.name(),
                sb.dev_count
            )));
        }
        let i = sb.dev_index;
        if let Some((_, other)) = slots.get(&i) {
            return Err(Error::Device(format!("{} and {} are both device {i} of the pool", other.name(), dev.name())));
        }
        slots.insert(i, (sb, dev));
    }
    // Every index is below `count`, so the first gap (or the end) is the
    // lowest missing device; it lies within the devices given.
    if let Some(i) = (0..count).zip(slots.keys()).find(|(want, have)| want != *have).map(|(w, _)| w) {
        return Err(Error::Device(format!("{i} of {count} is missing")));
    }
    if slots.len() as u64 != u64::from(count) {
        return Err(Error::Device(format!("{} of {count} is missing", slots.len())));
    }
    let mut best = first;
    let mut handles = Vec::with_capacity(slots.len());
    for (i, (sb, dev)) in slots {
        if sb.generation > best.generation {
            best = sb;
        }
        handles.push(DeviceHandle::new(i, dev));
    }
    check_journal(&best, &handles)?;
    Ok((best, handles))
}

/// The journal region of the chosen superblock against the real size of
/// the device it names.
fn check_journal(sb: &Superblock, handles: &[DeviceHandle]) -> Result<()> {
    let j = &sb.journal;
    let dev = handles.get(j.dev as usize).ok_or_else(|| {
        Error::corrupt("superblock", format!("journal on device {} of a pool of {}", j.dev, handles.len()))
    })?;
    let blocks = dev.blocks();
    if j.start.checked_add(j.blocks).is_none_or(|end| end > blocks) {
        return Err(Error::corrupt(
            format!("superblock of {}", dev.name()),
            format!("journal region {}+{} blocks ends past the device's {blocks} blocks", j.start, j.blocks),
        ));
    }
    Ok(())
}

/// Random pool identity.
pub fn new_pool_id() -> [u8; 16] {
    use rand::RngCore;
    let mut id = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut id);
    id
}
