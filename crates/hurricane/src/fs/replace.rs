//! Replacing a device of the pool with another (`hurricane device replace`).
//!
//! Two ways, each crash-safe at every step:
//!
//! - **Copy**, when the old device still reads: the slot's device becomes a
//!   mirror that reads the old one and writes both, every allocated range is
//!   copied across (a range copy holds the mirror's lock, so a write racing
//!   it lands after it; a range the old device fails to read is copied
//!   block by block, and blocks it cannot read at all are left for the
//!   check below), then the superblocks are written through the mirror,
//!   `pool.conf` is switched to the new device (the commit point: a
//!   temporary file renamed over it) and the slot takes the new device. A
//!   crash before the switch leaves the old device in place, current. What
//!   was copied is then verified: a scrub with repair of the meta-file and
//!   of every file with a piece on the device ([`ScrubOptions::focus`])
//!   reads every copy against its checksums and rewrites bad blocks (what
//!   the old device held wrong, or could not read) from redundancy; data
//!   with no good copy is reported by path and goes on the pool's list of
//!   permanent errors.
//! - **Rebuild**, when it does not (missing, faulted) or when asked: the new
//!   device gets a superblock saying it is *resilvering*, `pool.conf` names
//!   it, the other superblocks record the state, and the slot takes the new
//!   device in that state (writes reach it, reads come from redundancy).
//!   Device numbers do not change, so every extent's map stays as it is and
//!   the allocator already accounts the space. A scrub that rebuilds that
//!   device then rewrites every piece on it from the other copies, checkpoints
//!   (so the meta-file has its copy there again) and marks it online. A
//!   crash meanwhile reopens with the device still resilvering; `hurricane
//!   scrub` (or `device replace --resume`) finishes it. Data with no
//!   redundancy on a lost device is reported by path.

use super::errors::ErrorSource;
use super::scrub::{ScrubOptions, ScrubProgress, ScrubReport};
use super::Fs;
use crate::device::{Device, DeviceState, BLOCK_SIZE};
use crate::error::{Error, Result};
use crate::pool::{self, Superblock, RESERVED_BLOCKS};
use parking_lot::RwLock;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const BS: u64 = BLOCK_SIZE as u64;
/// Blocks copied under the mirror's lock at once (1 MiB).
const COPY_BLOCKS: u64 = 256;

/// How to replace a device.
#[derive(Debug, Clone, Default)]
pub struct ReplaceOptions {
    /// The pool directory whose `pool.conf` is switched to `new_path`.
    pub pool_dir: Option<PathBuf>,
    /// What `pool.conf` calls the new device.
    pub new_path: Option<PathBuf>,
    /// Rebuild from redundancy even if the old device still reads.
    pub rebuild: bool,
    /// The rebuild's scrub (rate, position file, stop).
    pub scrub: ScrubOptions,
}

/// Progress of a replacement.
#[derive(Debug, Clone)]
pub enum ReplaceProgress {
    /// Bytes copied from the old device, of all it holds.
    Copy {
        done: u64,
        total: u64,
    },
    Rebuild(ScrubProgress),
    /// The check of what was copied (copy).
    Verify(ScrubProgress),
}

/// What a replacement did.
#[derive(Debug, Clone, Default)]
pub struct ReplaceReport {
    /// Bytes copied from the old device (copy).
    pub copied_bytes: u64,
    /// Blocks the old device could not read (copy): left for the check.
    pub unreadable_blocks: u64,
    /// The rebuild's scrub (rebuild).
    pub rebuild: Option<ScrubReport>,
    /// The scrub that verified what was copied (copy).
    pub verify: Option<ScrubReport>,
}

/// Reads one device, writes two: the slot's device while a copy runs.
struct Mirror {
    name: String,
    old: Arc<dyn Device>,
    new: Arc<dyn Device>,
    /// Writes hold it shared; a range copy exclusive.
    lock: RwLock<()>,
}

impl Device for Mirror {
    fn name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> u64 {
        self.old.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        self.old.read_at(buf, offset)
    }
    fn seeks(&self) -> bool {
        self.old.seeks()
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let _g = self.lock.read();
        self.old.write_at(buf, offset)?;
        self.new.write_at(buf, offset)
    }
    fn flush(&self) -> Result<()> {
        self.old.flush()?;
        self.new.flush()
    }
}

impl Mirror {
    /// Copies blocks [blk, blk+n); returns how many the old device could
    /// not read (those are written as zeros, for the check after the copy
    /// to rebuild). A range that fails to read is tried block by block.
    fn copy(&self, blk: u64, n: u64, buf: &mut [u8]) -> Result<u64> {
        let _g = self.lock.write();
        let b = &mut buf[..(n * BS) as usize];
        let mut unreadable = 0;
        if self.old.read_at(b, blk * BS).is_err() {
            for (i, one) in b.chunks_mut(BS as usize).enumerate() {
                if let Err(e) = self.old.read_at(one, (blk + i as u64) * BS) {
                    tracing::warn!("device replace: block {} of the old device: {e}", blk + i as u64);
                    one.fill(0);
                    unreadable += 1;
                }
            }
        }
        self.new.write_at(b, blk * BS)?;
        Ok(unreadable)
    }
}

impl Fs {
    /// Replaces device `old` of the pool with `new` (see the module notes).
    pub fn replace_device(
        &self,
        old: u32,
        new: Arc<dyn Device>,
        opts: &ReplaceOptions,
        progress: &dyn Fn(&ReplaceProgress),
    ) -> Result<ReplaceReport> {
        self.check_writable()?;
        let h = self.storage().devs.get(old as usize).ok_or_else(|| {
            Error::Invalid(format!("device {old}: the pool has {} devices", self.storage().devs.len()))
        })?;
        if h.state() == DeviceState::Resilvering {
            return Err(Error::Invalid(format!(
                "device {old} ({}) is being resilvered: finish that first (hurricane scrub)",
                h.name()
            )));
        }
        let need = h.blocks() * BS;
        if new.size() < need {
            return Err(Error::Device(format!(
                "{}: {} bytes, smaller than device {old} ({need} bytes)",
                new.name(),
                new.size()
            )));
        }
        let readable = h.state() == DeviceState::Online && {
            let mut b = vec![0u8; BLOCK_SIZE];
            h.dev().read_at(&mut b, 0).is_ok()
        };
        if readable && !opts.rebuild {
            let (copied, unreadable) = self.replace_by_copy(old, new, opts, progress)?;
            // What was copied is checked against the checksums, and what
            // the old device held wrong is rebuilt from redundancy.
            let sopts = ScrubOptions {
                repair: true,
                rate: opts.scrub.rate,
                stop: opts.scrub.stop.clone(),
                focus: vec![old],
                source: ErrorSource::Replace,
                ..Default::default()
            };
            let v = self.scrub(&sopts, &|p| progress(&ReplaceProgress::Verify(p.clone())))?;
            tracing::info!(
                "device {old}: copy verified ({} blocks checked, {} rebuilt from redundancy, {} files with unrecoverable data)",
                v.checked_blocks,
                v.repaired_blocks,
                v.lost.len()
            );
            return Ok(ReplaceReport {
                copied_bytes: copied,
                unreadable_blocks: unreadable,
                rebuild: None,
                verify: Some(v),
            });
        }
        self.start_rebuild(old, new, opts)?;
        let mut sopts = opts.scrub.clone();
        sopts.repair = true;
        sopts.rebuild = vec![old];
        sopts.resilver_only = true;
        sopts.source = ErrorSource::Replace;
        let r = self.scrub(&sopts, &|p| progress(&ReplaceProgress::Rebuild(p.clone())))?;
        Ok(ReplaceReport { rebuild: Some(r), ..Default::default() })
    }

    fn replace_by_copy(
        &self,
        old: u32,
        new: Arc<dyn Device>,
        opts: &ReplaceOptions,
        progress: &dyn Fn(&ReplaceProgress),
    ) -> Result<(u64, u64)> {
        let h = &self.storage().devs[old as usize];
        let alloc = &self.storage().allocs[old as usize];
        // Nothing of a previous use may look like a superblock of this pool.
        new.write_at(&vec![0u8; (RESERVED_BLOCKS * BS) as usize], 0)?;
        let old_dev = h.dev();
        let mirror = Arc::new(Mirror {
            name: old_dev.name().to_string(),
            old: old_dev.clone(),
            new: new.clone(),
            lock: RwLock::new(()),
        });
        // The swap waits for requests in flight on the old device, so none
        // writes to it alone once the copy starts.
        h.swap(mirror.clone());
        // Everything not free: data, meta-file, journal, and space whose
        // free waits for a commit. Space allocated from now on is written
        // through the mirror.
        let mut used = Vec::new();
        let mut pos = RESERVED_BLOCKS;
        for (s, l) in alloc.free_extents() {
            if s > pos {
                used.push((pos, s - pos));
            }
            pos = pos.max(s + l);
        }
        if pos < alloc.total_blocks() {
            used.push((pos, alloc.total_blocks() - pos));
        }
        let total: u64 = used.iter().map(|r| r.1 * BS).sum();
        let mut done = 0u64;
        let mut unreadable = 0u64;
        let mut buf = vec![0u8; (COPY_BLOCKS * BS) as usize];
        let stop = || opts.scrub.stop.as_ref().is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed));
        let copy = || -> Result<()> {
            for (s, l) in used {
                let mut b = s;
                while b < s + l {
                    if stop() {
                        return Err(Error::Invalid("replacement stopped before the copy finished".into()));
                    }
                    let n = COPY_BLOCKS.min(s + l - b);
                    unreadable += mirror.copy(b, n, &mut buf).map_err(|e| {
                        Error::Device(format!(
                            "copying device {old} block {b}: {e} (rebuild from redundancy instead: --rebuild)"
                        ))
                    })?;
                    b += n;
                    done += n * BS;
                    progress(&ReplaceProgress::Copy { done, total });
                }
            }
            Ok(())
        };
        if let Err(e) = copy() {
            h.swap(old_dev);
            return Err(e);
        }
        // The switch: superblocks on every device (the new one through the
        // mirror), then pool.conf, then the slot.
        let mut m = self.inner.meta.lock();
        let r = (|| -> Result<()> {
            mirror.flush()?;
            let mut sb = m.sb.clone();
            sb.generation += 1;
            self.storage().write_superblocks(&sb)?;
            m.sb = sb;
            if let (Some(dir), Some(p)) = (&opts.pool_dir, &opts.new_path) {
                set_device_path(dir, old, p)?;
            }
            Ok(())
        })();
        if let Err(e) = r {
            h.swap(old_dev);
            return Err(e);
        }
        h.swap(new);
        drop(m);
        tracing::info!("device {old}: replaced by {} (copied {total} bytes, {unreadable} blocks unreadable)", h.name());
        Ok((total, unreadable))
    }

    /// Puts `new` in slot `old` as a resilvering device, recording that in
    /// every superblock (and pool.conf) first.
    fn start_rebuild(&self, old: u32, new: Arc<dyn Device>, opts: &ReplaceOptions) -> Result<()> {
        let h = &self.storage().devs[old as usize];
        let mut m = self.inner.meta.lock();
        let mut sb = m.sb.clone();
        sb.generation += 1;
        mark_resilvering(&mut sb, old);
        claim_device(&*new, &sb, old)?;
        if let (Some(dir), Some(p)) = (&opts.pool_dir, &opts.new_path) {
            set_device_path(dir, old, p)?;
        }
        h.swap(new);
        h.set_state(DeviceState::Resilvering);
        self.storage().write_superblocks(&sb)?;
        m.sb = sb;
        Ok(())
    }
}

fn mark_resilvering(sb: &mut Superblock, dev: u32) {
    sb.dev_states.retain(|(i, _)| *i != dev);
    sb.dev_states.push((dev, DeviceState::Resilvering as u8));
    sb.dev_states.sort_unstable();
}

/// Writes `sb` as device `index`'s superblock on `dev` and flushes it.
fn write_superblock_on(dev: &dyn Device, sb: &Superblock, index: u32) -> Result<()> {
    let mut s = sb.clone();
    s.dev_index = index;
    s.dev_blocks = dev.size() / BS;
    dev.write_at(&s.encode()?, (sb.generation % 2) * BS)?;
    dev.flush()
}

/// Makes `sb` the only superblock on a device taking a slot: written first
/// (it has the highest generation, so it wins over whatever the device
/// held), then the other slot cleared of anything an earlier use left.
fn claim_device(dev: &dyn Device, sb: &Superblock, index: u32) -> Result<()> {
    write_superblock_on(dev, sb, index)?;
    dev.write_at(&vec![0u8; BLOCK_SIZE], ((sb.generation + 1) % 2) * BS)?;
    dev.flush()
}

/// Rewrites `pool.conf` with device `index` at `path` (a temporary file
/// renamed over it, so a crash leaves the old list or the new one).
pub fn set_device_path(dir: &Path, index: u32, path: &Path) -> Result<()> {
    let f = dir.join(pool::POOL_FILE);
    let text = pool::read_pool_text(dir).map_err(|e| Error::io(f.display().to_string(), e))?;
    let mut seen = 0u32;
    let mut out = String::new();
    let mut done = false;
    for line in text.lines() {
        if pool::is_device_line(line.trim()) {
            if seen == index {
                out.push_str(&format!("device = {}\n", path.display()));
                done = true;
                seen += 1;
                continue;
            }
            seen += 1;
        }
        out.push_str(line);
        out.push('\n');
    }
    if !done {
        return Err(Error::Invalid(format!("{}: lists no device {index}", f.display())));
    }
    pool::replace_pool_file(dir, &out)
}

/// The newest superblock among `devs` (none of which is `skip`).
fn newest_superblock(devs: &[(u32, Arc<dyn Device>)], skip: u32) -> Result<Superblock> {
    let mut best: Option<Superblock> = None;
    let mut buf = vec![0u8; BLOCK_SIZE];
    for (_, d) in devs {
        for slot in 0..RESERVED_BLOCKS {
            d.read_at(&mut buf, slot * BS)?;
            if let Ok(Some(sb)) = Superblock::decode(&buf, d.name()) {
                if let Some(b) = &best {
                    if b.pool_id != sb.pool_id {
                        return Err(Error::Device(format!("{}: belongs to another pool", d.name())));
                    }
                }
                if best.as_ref().is_none_or(|b| sb.generation > b.generation) {
                    best = Some(sb);
                }
            }
        }
    }
    best.ok_or_else(|| Error::Device(format!("no device of the pool has a valid superblock (device {skip} aside)")))
}

/// For a pool that is not open and whose device `old` is gone: makes `new`
/// (an image file, a block device or a rados device, at least as large)
/// its replacement in the resilvering state, before the pool is opened. Opening then finds the
/// new device; a scrub rebuilds it (`Fs::scrub` finishes a resilver).
/// Order: the new device's superblock, pool.conf, the others' superblocks;
/// a crash at any point leaves a pool that opens as before or resilvering.
pub fn prepare_offline_replacement(dir: &Path, old: u32, new_path: &Path) -> Result<()> {
    let paths = pool::device_paths(dir)?;
    if old as usize >= paths.len() {
        return Err(Error::Invalid(format!("device {old}: the pool has {} devices", paths.len())));
    }
    // The devices that are there, wherever they are (rados devices too).
    let others: Vec<(u32, Arc<dyn Device>)> = pool::open_paths(&paths, true)?
        .into_iter()
        .enumerate()
        .filter(|(i, d)| *i as u32 != old && !d.gone())
        .map(|(i, d)| (i as u32, d))
        .collect();
    let new = pool::open_device(new_path, true)?;
    prepare_replacement(&others, old, &*new, &|| set_device_path(dir, old, new_path))
}

/// [`prepare_offline_replacement`] on devices: `others` are the pool's
/// devices that are there (with their indexes), `switch` records the new
/// device wherever the pool's device list is kept (between the new
/// device's superblock and the others').
pub fn prepare_replacement(
    others: &[(u32, Arc<dyn Device>)],
    old: u32,
    new: &dyn Device,
    switch: &dyn Fn() -> Result<()>,
) -> Result<()> {
    let mut sb = newest_superblock(others, old)?;
    if old >= sb.dev_count {
        return Err(Error::Invalid(format!("device {old}: the pool has {} devices", sb.dev_count)));
    }
    sb.generation += 1;
    sb.clean = false;
    mark_resilvering(&mut sb, old);
    if new.size() < (RESERVED_BLOCKS + 64) * BS {
        return Err(Error::Device(format!("{}: too small ({} bytes)", new.name(), new.size())));
    }
    for j in sb.journals().iter().filter(|j| j.dev == old) {
        // The journal copy is lost with the device: replay must find its
        // end right at the cursor, not stale records of an earlier use.
        let at = j.start + sb.cursor.tail;
        let n = 4u64.min(j.blocks - sb.cursor.tail);
        new.write_at(&vec![0u8; (n * BS) as usize], at * BS)?;
    }
    claim_device(new, &sb, old)?;
    switch()?;
    for (i, d) in others {
        write_superblock_on(&**d, &sb, *i)?;
    }
    Ok(())
}
