//! Taking a device out of the pool (`hurricane device remove`): every file
//! with a piece on it moves to other devices, then the device is marked
//! removed. Its slot stays, so device numbers never change.
//!
//! Steps, each crash-safe:
//!
//! 1. The device is marked *evacuating* in every superblock: from then on
//!    no new data is placed on it (the resolver never picks it, and a
//!    layout naming it is refused), while it still serves what it holds.
//! 2. Each file with a per-device leaf on it is migrated online
//!    ([`super::migrate`]) to a tree with those leaves on other devices
//!    ([`crate::layout::relocate`]: a redundancy group keeps its pieces on
//!    distinct devices): its data is copied through the old tree (so a
//!    missing or failing device is read around by redundancy) while the
//!    file stays in use, and the new tree is installed by one journalled
//!    `SetLayout`. The old tree's space is freed once that batch commits.
//!    A crash before the switch leaves the old tree in force and the
//!    copy's space free; after it, the new tree.
//! 3. When no file is left on it (the scan is repeated until one finds
//!    none), what the pool keeps there besides files moves: a copy of the
//!    meta-file by a checkpoint written to a layout with that copy
//!    elsewhere; a copy of the journal by a superblock naming a new region
//!    on another device, written just after a checkpoint under the
//!    meta-data lock (the journal is empty then, and no commit can add to
//!    it before the switch). The device is then marked *removed* in every
//!    superblock and a checkpoint is taken.
//!
//! Directories whose default layout names the device (`extent@2`) are
//! given the same spec on other devices, at the start and again at the end.
//!
//! A crash during step 2 or 3 reopens the pool with the device still
//! evacuating; running the removal again finishes it.

use super::{Fs, MigrateOptions};
use crate::blocks::{Health, BLOCK_SIZE};
use crate::device::DeviceState;
use crate::error::{Error, Result};
use crate::journal::{Ino, Op, Region};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BS: u64 = BLOCK_SIZE as u64;

/// How to remove a device.
#[derive(Debug, Clone, Default)]
pub struct RemoveOptions {
    /// Set from elsewhere to stop after the file being moved (the device
    /// stays evacuating; running the removal again goes on).
    pub stop: Option<Arc<AtomicBool>>,
}

/// Progress of a removal, after every copied request.
#[derive(Debug, Clone, Default)]
pub struct RemoveProgress {
    pub files_done: u64,
    pub files_total: u64,
    /// File bytes visited so far, and in all (the files' sizes, rounded up
    /// to whole blocks; holes are skipped, so the count may end short).
    pub done_bytes: u64,
    pub total_bytes: u64,
}

/// What a removal did.
#[derive(Debug, Clone, Default)]
pub struct RemoveReport {
    pub files_moved: u64,
    pub bytes_copied: u64,
    /// The device was already evacuating (an earlier removal was stopped
    /// or interrupted by a crash).
    pub resumed: bool,
    /// False when stopped before the end: the device is still evacuating.
    pub complete: bool,
    pub duration: Duration,
}

impl Fs {
    /// Empties device `dev` onto the others and takes it out of the pool
    /// (see the module notes).
    pub fn remove_device(
        &self,
        dev: u32,
        opts: &RemoveOptions,
        progress: &dyn Fn(&RemoveProgress),
    ) -> Result<RemoveReport> {
        let t0 = Instant::now();
        self.check_writable()?;
        let n = self.storage().device_count();
        let h = self
            .storage()
            .devs
            .get(dev as usize)
            .ok_or_else(|| Error::Invalid(format!("device {dev}: the pool has {n} devices")))?;
        match h.state() {
            DeviceState::Removed => {
                return Err(Error::Invalid(format!("device {dev} ({}) is already removed", h.name())))
            }
            DeviceState::Resilvering => {
                return Err(Error::Invalid(format!(
                    "device {dev} ({}) is being resilvered: finish that first (hurricane scrub)",
                    h.name()
                )))
            }
            _ => {}
        }
        self.check_removable(dev)?;
        if !self.storage().devs.iter().any(|d| d.index != dev && d.state().placeable()) {
            return Err(Error::Invalid(format!("device {dev}: no other device of the pool takes data")));
        }
        // Enough room elsewhere for what it holds (a first check: layouts
        // may place more than that, as their groups require).
        let mut held = 0u64;
        for node in self.state().each() {
            if let Some(l) = node.data.read().layout()? {
                l.extents(&mut |d, _, len| {
                    if d == dev {
                        held = held.saturating_add(len);
                    }
                });
            }
        }
        let room: u64 = self
            .storage()
            .devs
            .iter()
            .filter(|d| d.index != dev && d.state().placeable())
            .map(|d| self.storage().allocs[d.index as usize].free_blocks())
            .sum();
        if held > room {
            return Err(Error::NoSpace(format!(
                "device {dev} holds {} bytes of data, the other devices have {} bytes free",
                held * BS,
                room * BS
            )));
        }
        // Files whose data on it has no other copy cannot move while it is away.
        let down = |d: u32| d == dev || self.storage().devs.get(d as usize).is_none_or(|x| !x.state().readable());
        let mut stuck: Vec<Ino> = Vec::new();
        for n in self.state().each() {
            if n.data.read().layout()?.is_some_and(|l| {
                l.nodes().iter().any(|b| b.device() == Some(dev)) && l.root().health(&down) == Health::Lost
            }) {
                stuck.push(n.ino);
            }
        }
        if !stuck.is_empty() && !h.state().readable() {
            return Err(Error::Device(format!(
                "{dev} ({}) is {}, and these files have data only there, which cannot be moved: {} \
                 (bring the device back, or delete them)",
                h.name(),
                h.state(),
                self.joined_paths(&stuck)
            )));
        }
        // Every file must have somewhere to go before anything is marked.
        let info = self.pool_info();
        let mut nowhere: Vec<Ino> = Vec::new();
        let mut why = String::new();
        for (ino, _) in self.files_on(dev)? {
            let Some(n) = self.state().get(ino) else { continue };
            let Some(l) = n.data.read().layout()?.cloned() else { continue };
            if let Err(e) = crate::layout::relocate(&l.spec(), dev, &info) {
                why = e.to_string();
                nowhere.push(ino);
            }
        }
        if !nowhere.is_empty() {
            return Err(Error::Layout(format!(
                "device {dev} cannot be emptied: {} ({why}; remove them or add a device first)",
                self.joined_paths(&nowhere)
            )));
        }
        let resumed = self.inner.meta.lock().sb.dev_states.contains(&(dev, DeviceState::Evacuating as u8));
        if !resumed {
            self.set_persistent_state(dev, Some(DeviceState::Evacuating))?;
            tracing::info!("device {dev} ({}): evacuating", h.name());
        }
        // New files in directories whose default names it go elsewhere now.
        self.relocate_dir_layouts(dev)?;
        let stop = || opts.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed));
        let mut report = RemoveReport { resumed, ..Default::default() };
        let mut p = RemoveProgress::default();
        loop {
            let files = self.files_on(dev)?;
            if files.is_empty() {
                break;
            }
            p.files_total += files.len() as u64;
            p.total_bytes += files.iter().map(|f| f.1.div_ceil(BS) * BS).sum::<u64>();
            for (ino, _) in files {
                if stop() {
                    report.duration = t0.elapsed();
                    return Ok(report);
                }
                let copied = self.move_off(ino, dev, &mut |b| {
                    p.done_bytes += b;
                    progress(&p);
                })?;
                if copied.is_some() {
                    report.files_moved += 1;
                }
                report.bytes_copied += copied.unwrap_or(0);
                p.files_done += 1;
                progress(&p);
            }
        }
        // A directory default set to name it meanwhile names another device.
        self.relocate_dir_layouts(dev)?;
        self.move_fixed_regions(dev)?;
        self.adjust_default_layout(dev)?;
        // Nothing refers to it any more: out of the pool for good.
        self.commit_all()?;
        self.set_persistent_state(dev, Some(DeviceState::Removed))?;
        self.checkpoint()?;
        tracing::info!("device {dev} ({}): removed ({} files moved)", h.name(), report.files_moved);
        report.complete = true;
        report.duration = t0.elapsed();
        Ok(report)
    }

    /// Checks that what the pool keeps on `dev` besides files (the journal,
    /// its mirror, meta-file copies) has somewhere else to go.
    fn check_removable(&self, dev: u32) -> Result<()> {
        let info = self.pool_info();
        let m = self.inner.meta.lock();
        let meta = self.inner.state.store().file().layout();
        if meta.nodes().iter().any(|n| n.device() == Some(dev)) {
            self.meta_file_without(dev, &info).map_err(|e| {
                Error::NotSupported(format!("device {dev} holds a copy of the meta-data, which cannot move: {e}"))
            })?;
        }
        let copies = journal_copies(&m.sb);
        let spare = copies.len() > 2;
        for (r, other) in copies {
            if r.dev == dev && !spare && journal_target(self.storage(), dev, &other).is_none() {
                return Err(Error::NotSupported(format!(
                    "device {dev} holds a copy of the journal, and no other device can take it (the pool needs \
                     another device besides the other copy's; add one first)"
                )));
            }
        }
        Ok(())
    }

    /// Moves the meta-file's copies and the journal's copies off `dev`
    /// (module notes, step 3): the meta-file by a checkpoint written to its
    /// new layout; each journal copy by a superblock that names a new
    /// region, written right after a checkpoint, while the journal is
    /// empty and the meta-data lock keeps commits out, so no record is
    /// ever in a region the superblock no longer names.
    fn move_fixed_regions(&self, dev: u32) -> Result<()> {
        {
            let mut m = self.inner.meta.lock();
            let meta = self.inner.state.store().file().layout();
            if meta.nodes().iter().any(|n| n.device() == Some(dev)) {
                let spec = self.meta_file_without(dev, &self.pool_info())?;
                tracing::info!("meta-file: moving off device {dev} to {spec}");
                m.relayout = Some(spec);
            }
        }
        // Commits may come between the checkpoint and the lock: then again.
        for _ in 0..64 {
            self.checkpoint()?;
            let mut m = self.inner.meta.lock();
            if m.relayout.is_some() {
                continue;
            }
            if m.cursor.tail != m.cursor.head {
                continue;
            }
            let mut sb = m.sb.clone();
            let mut moved = Vec::new();
            let copies: Vec<(Region, Vec<u32>)> = journal_copies(&sb);
            let count = copies.len();
            for (i, (r, other)) in copies.into_iter().enumerate() {
                if r.dev != dev {
                    continue;
                }
                let Some(j) = journal_target(self.storage(), dev, &other) else {
                    // No device without a copy: with two or more others
                    // left, this one is dropped.
                    if count <= 2 {
                        return Err(Error::NotSupported(format!(
                            "no device can take the journal copy on device {dev}"
                        )));
                    }
                    let mut all = sb.journals();
                    all.remove(i);
                    sb.journal = all[0];
                    sb.journal_copies = all[1..].to_vec();
                    moved.push((r, None));
                    continue;
                };
                let a = &self.storage().allocs[j as usize];
                let start = match a.alloc_reserved(None, r.blocks) {
                    Some((s, n)) if n == r.blocks => s,
                    Some((s, n)) => {
                        a.free_now(s, n);
                        return Err(Error::NoSpace(format!(
                            "device {j}: no {} contiguous free blocks for the journal",
                            r.blocks
                        )));
                    }
                    None => return Err(Error::NoSpace(format!("device {j}: no room for the journal"))),
                };
                let new = Region { dev: j, start, blocks: r.blocks };
                // Replay starts at the cursor: nothing there may look like a record.
                let tail = m.cursor.tail;
                let n = 4u64.min(r.blocks - tail);
                let h = &self.storage().devs[j as usize];
                h.write_blocks(start + tail, &vec![0u8; (n * BS) as usize])?;
                h.flush()?;
                if i == 0 {
                    sb.journal = new;
                } else {
                    sb.journal_copies[i - 1] = new;
                }
                moved.push((r, Some(new)));
            }
            if moved.is_empty() {
                return Ok(());
            }
            sb.generation += 1;
            self.storage().write_superblocks(&sb)?;
            m.sb = sb;
            for (old, new) in moved {
                if let Some(a) = self.storage().allocs.get(old.dev as usize) {
                    a.free_now(old.start, old.blocks);
                }
                match new {
                    Some(new) => tracing::info!(
                        "journal copy moved from device {} to device {} (blocks {}+{})",
                        old.dev,
                        new.dev,
                        new.start,
                        new.blocks
                    ),
                    None => tracing::info!("journal copy on device {} dropped: no other device can take it", old.dev),
                }
            }
            return Ok(());
        }
        Err(Error::Invalid(format!(
            "the journal on device {dev} could not be moved: commits kept arriving between checkpoints"
        )))
    }

    /// Keeps the pool's default layout usable without device `dev`: one that
    /// names it names other devices; one whose width the remaining devices
    /// cannot give (`stripe(width=4)` on 3) loses its width, so it spans
    /// every device that takes data. Recorded with the next superblock.
    fn adjust_default_layout(&self, dev: u32) -> Result<()> {
        let cur = self.default_layout();
        let info = self.pool_info();
        let spec = crate::layout::parse(&cur)?;
        let mut new = crate::layout::relocate(&spec, dev, &info)?;
        if crate::layout::resolve(&new, &info).is_err() {
            let t = crate::blocks::lookup(&new.kind);
            if let Some(wp) = t.and_then(|t| t.width_param).filter(|_| t.is_some_and(|t| t.distinct_devices)) {
                new.params.retain(|(k, _)| k != wp);
            }
            crate::layout::resolve(&new, &info).map_err(|e| {
                Error::Layout(format!("the pool's default layout {cur} cannot do without device {dev}: {e}"))
            })?;
        }
        let new = new.to_string();
        if new != cur {
            let mut m = self.inner.meta.lock();
            m.sb.default_layout = new.clone();
            *self.inner.default_layout.write() = new.clone();
            tracing::info!("default layout {cur} is now {new}");
        }
        Ok(())
    }

    /// Rewrites the default layouts of directories that name device `dev`
    /// (`replicate[extent@1,extent@2]`) to name other devices, as a file's
    /// layout is moved. Specs that only give widths stay as they are.
    fn relocate_dir_layouts(&self, dev: u32) -> Result<()> {
        let names = |s: &crate::layout::Spec| -> bool {
            fn walk(s: &crate::layout::Spec, dev: u32) -> bool {
                s.device == Some(dev) || s.children.iter().any(|c| walk(c, dev))
            }
            walk(s, dev)
        };
        for node in self.state().each() {
            let text = match node.data.read().dir() {
                Some(d) if !d.layout.is_empty() => d.layout.clone(),
                _ => continue,
            };
            let Ok(spec) = crate::layout::parse(&text) else { continue };
            if !names(&spec) {
                continue;
            }
            let ino = node.ino;
            let new = crate::layout::relocate(&spec, dev, &self.pool_info()).map_err(|e| {
                Error::Layout(format!("directory {}: default layout {text}: {e}", self.joined_paths(&[ino])))
            })?;
            let g = self.inner.gate.enter();
            let mut l = self.state().lock(&[ino]);
            let op = Op::SetDirLayout { ino, spec: new.to_string() };
            self.state().apply(&op, &mut l)?;
            self.log(&g, &[op]);
            tracing::info!("directory inode {ino}: default layout {text} now {new}");
        }
        Ok(())
    }

    /// Every path of the inodes `inos`, sorted, joined for a message.
    fn joined_paths(&self, inos: &[Ino]) -> String {
        let mut names: Vec<String> = self.paths_of(&inos.iter().copied().collect()).into_values().flatten().collect();
        names.sort();
        names.join(", ")
    }

    /// Regular files with a per-device leaf on `dev`, with their sizes.
    fn files_on(&self, dev: u32) -> Result<Vec<(Ino, u64)>> {
        let mut out = Vec::new();
        for n in self.state().each() {
            let d = n.data.read();
            if d.layout()?.is_some_and(|l| l.nodes().iter().any(|b| b.device() == Some(dev))) {
                out.push((n.ino, d.size));
            }
        }
        Ok(out)
    }

    /// Moves file `ino` off device `dev` (module notes, step 2). Returns the
    /// bytes copied, or None when the file no longer has a piece there.
    fn move_off(&self, ino: Ino, dev: u32, copied: &mut dyn FnMut(u64)) -> Result<Option<u64>> {
        let Some(node) = self.state().get(ino) else { return Ok(None) };
        let Some(old) = node.data.read().layout()?.cloned() else { return Ok(None) };
        if !old.nodes().iter().any(|b| b.device() == Some(dev)) {
            return Ok(None);
        }
        let spec = crate::layout::relocate(&old.spec(), dev, &self.pool_info())
            .map_err(|e| Error::Layout(format!("inode {ino} ({}): {e}", self.joined_paths(&[ino]))))?;
        // An online migration: the file stays in use while it moves.
        let last = std::cell::Cell::new(0u64);
        let copied = std::cell::RefCell::new(copied);
        let r = self.migrate(ino, &spec.to_string(), &MigrateOptions::default(), &|p| {
            (copied.borrow_mut())(p.copied_bytes - last.replace(p.copied_bytes));
        });
        let r = match r {
            Ok(r) => r,
            // Deleted meanwhile: nothing left to move.
            Err(_) if self.state().get(ino).is_none() => return Ok(None),
            Err(e) => {
                return Err(Error::Device(format!(
                    "inode {ino} ({}): moving it off device {dev}: {e}",
                    self.joined_paths(&[ino])
                )))
            }
        };
        tracing::debug!("inode {ino}: moved off device {dev} ({} bytes)", r.copied_bytes);
        Ok(Some(r.copied_bytes))
    }

    /// Records device `dev`'s persistent state (None: online) in every
    /// superblock and puts its slot in it.
    pub(super) fn set_persistent_state(&self, dev: u32, st: Option<DeviceState>) -> Result<()> {
        let mut m = self.inner.meta.lock();
        let mut sb = m.sb.clone();
        sb.dev_states.retain(|(i, _)| *i != dev);
        if let Some(s) = st {
            sb.dev_states.push((dev, s as u8));
            sb.dev_states.sort_unstable();
        }
        sb.generation += 1;
        if let Some(h) = self.storage().devs.get(dev as usize) {
            // A device that is away stays so until it is back: what is
            // recorded is what it will be then.
            let away = matches!(h.state(), DeviceState::Missing | DeviceState::Faulted);
            let s = st.unwrap_or(DeviceState::Online);
            if !away || s == DeviceState::Removed {
                h.set_state(s);
            }
        }
        self.storage().write_superblocks(&sb)?;
        m.sb = sb;
        Ok(())
    }
}

impl Fs {
    /// The meta-file's tree without its copy on `dev`. A tree the pool
    /// made (copies of one extent each) moves the copy to a healthy device
    /// that holds none, or, where there is none and two or more copies
    /// remain, leaves it out; any other tree is relocated leaf by leaf.
    fn meta_file_without(&self, dev: u32, info: &crate::layout::PoolInfo) -> Result<crate::blocks::Spec> {
        let meta = self.inner.state.store().file().layout();
        let Some(devs) = super::meta_copies::made_by_pool(&meta, info) else {
            return crate::layout::relocate(&meta.spec(), dev, info);
        };
        let mut keep: Vec<u32> = devs.iter().copied().filter(|&d| d != dev).collect();
        match self.spare_devices(&devs).into_iter().find(|&d| d != dev) {
            Some(t) => keep.push(t),
            None if keep.len() >= 2 => {}
            None => {
                return Err(Error::Layout(format!(
                    "no device to move the meta-file's copy on device {dev} to, and fewer than two others"
                )))
            }
        }
        crate::layout::resolve(&crate::layout::parse(&super::meta_layout_on(&keep))?, info)
    }
}

/// The journal's copies, each with the devices of the others.
fn journal_copies(sb: &crate::pool::Superblock) -> Vec<(Region, Vec<u32>)> {
    let all = sb.journals();
    all.iter().map(|r| (*r, all.iter().filter(|o| o.dev != r.dev).map(|o| o.dev).collect())).collect()
}

/// The device a journal copy on `from` moves to: one that takes new data,
/// is neither `from` nor another copy's, with the most free space.
fn journal_target(storage: &crate::pool::Storage, from: u32, others: &[u32]) -> Option<u32> {
    storage
        .devs
        .iter()
        .filter(|d| d.index != from && !others.contains(&d.index) && d.state().placeable())
        .max_by_key(|d| storage.allocs.get(d.index as usize).map_or(0, |a| a.free_blocks()))
        .map(|d| d.index)
}
