//! The meta-data's copies, kept where the pool wants them.
//!
//! The meta-file and the journal hold every file's name and map, so the
//! pool keeps more copies of them than its most tolerant file layout needs
//! (`meta_copies_wanted`: the failures that layout survives plus two, at
//! least three, as far as the pool has devices), each on a device of its
//! own. Three things keep it so, all on the committer's path:
//!
//! - A file layout that survives more device failures than any before it
//!   (`note_layout`, when a new file's or a migration's layout is
//!   resolved) raises the count, recorded in the superblock
//!   (`Superblock::meta_survives`).
//! - A commit notices when the copies fall short of the count and a
//!   healthy device without a copy could take one (`copies_short`): a
//!   device holding a copy failed or went missing, or the count went up.
//!   That commit becomes a checkpoint, which plans a new tree for the
//!   meta-file (`plan_meta_file`: the copies on healthy devices, plus new
//!   ones on the healthy devices with the most free space) and copies the
//!   meta-file to it; right after it, while the journal is empty and the
//!   meta-data lock keeps commits out, the journal's copies are placed the
//!   same way (`place_journal`): a new region on each device that takes a
//!   copy, the superblocks written naming them, the regions of copies on
//!   failed devices freed.
//! - Each journal record counts the copies it reached (`note_record`):
//!   fewer than it was written to is reported (a warning, and
//!   [`MetaRedundancy`] in `status`) until the copies are placed anew.
//!
//! Nothing moves while a device is being resilvered or emptied: those
//! operations place the meta-data themselves. A pool made with a meta-file
//! layout of its own (`mkfs --meta-layout`) keeps it as it is; its
//! redundancy is reported all the same.

use super::{meta_copies_wanted, meta_layout_on, Fs, MetaState, MAX_META_COPIES};
use crate::base::Region;
use crate::blocks::Layout;
use crate::device::{DeviceState, BLOCK_SIZE};
use crate::error::Result;
use std::sync::atomic::Ordering;

/// `Inner::meta_survives` when the pool keeps its meta-file layout as made.
pub(super) const UNMANAGED: u32 = u32::MAX;

/// How the pool's meta-data copies stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRedundancy {
    /// Copies the pool keeps of the meta-file and of the journal (None: the
    /// meta-file layout given at mkfs is kept as it is).
    pub wanted: Option<u32>,
    /// The most device failures a file layout used in the pool survives.
    pub data_survives: Option<u32>,
    /// The devices holding a copy of the meta-file, each with whether it is
    /// online.
    pub meta_file: Vec<(u32, bool)>,
    /// Device failures the meta-file survives as the devices stand now.
    pub meta_file_survives: u32,
    /// The devices holding a copy of the journal, each with whether it is
    /// online.
    pub journal: Vec<(u32, bool)>,
    /// The copies the last journal record reached, of those it was
    /// written to (0 of 0 before the first record of this open).
    pub last_record: (u32, u32),
}

impl MetaRedundancy {
    /// Journal copies on online devices.
    pub fn journal_online(&self) -> u32 {
        self.journal.iter().filter(|(_, ok)| *ok).count() as u32
    }

    /// Device failures the meta-data (meta-file and journal together)
    /// survives as the devices stand now.
    pub fn survives(&self) -> u32 {
        self.meta_file_survives.min(self.journal_online().saturating_sub(1))
    }

    /// Fewer copies than the pool keeps, or fewer than the data needs: a
    /// further failure may lose what the pool's files would survive.
    pub fn degraded(&self) -> bool {
        let short = self.wanted.is_some_and(|w| {
            self.meta_file.iter().filter(|(_, ok)| *ok).count() < w as usize || self.journal_online() < w
        });
        let record = self.last_record.0 < self.last_record.1;
        short || record || self.data_survives.is_some_and(|t| self.survives() < t)
    }
}

/// Whether a copy on a device in this state counts as healthy.
fn healthy(s: DeviceState) -> bool {
    s == DeviceState::Online
}

impl Fs {
    /// How the meta-data's copies stand now.
    pub fn meta_redundancy(&self) -> MetaRedundancy {
        let inner = &*self.inner;
        let state = |d: u32| inner.storage.devs.get(d as usize).map_or(DeviceState::Missing, |h| h.state());
        let m = inner.meta.lock();
        let lay = inner.state.store().file().layout();
        let mut meta_file: Vec<(u32, bool)> =
            lay.nodes().iter().filter_map(|n| n.device()).map(|d| (d, healthy(state(d)))).collect();
        meta_file.sort_unstable();
        meta_file.dedup();
        let journal = m.sb.journals().iter().map(|r| (r.dev, healthy(state(r.dev)))).collect();
        let survives = inner.meta_survives.load(Ordering::Relaxed);
        let rec = inner.last_record_copies.load(Ordering::Relaxed);
        let data_survives = (survives != UNMANAGED).then_some(survives);
        MetaRedundancy {
            wanted: data_survives.map(|t| meta_copies_wanted(self.active_devices(), t)),
            data_survives,
            meta_file,
            meta_file_survives: meta_file_survives_now(&lay, &state),
            journal,
            last_record: ((rec >> 32) as u32, rec as u32),
        }
    }

    /// Devices that are part of the pool (not removed).
    fn active_devices(&self) -> u32 {
        self.inner.storage.devs.iter().filter(|d| d.state() != DeviceState::Removed).count() as u32
    }

    /// Notes a file layout in use: one that survives more device failures
    /// than any before raises the meta-data's copies (the next commit
    /// places them).
    pub(crate) fn note_layout(&self, l: &Layout) {
        let cur = self.inner.meta_survives.load(Ordering::Relaxed);
        if cur == UNMANAGED {
            return;
        }
        let t = l.failures_survived(MAX_META_COPIES);
        if t > cur && self.inner.meta_survives.fetch_max(t, Ordering::Relaxed) < t {
            tracing::info!(
                "a layout surviving {t} device failures is in use: the meta-data keeps {} copies",
                meta_copies_wanted(self.active_devices(), t)
            );
        }
    }

    /// Records how many copies the last journal record reached.
    pub(super) fn note_record(&self, durable: usize, total: usize) {
        let v = ((durable as u64) << 32) | total as u64;
        let was = self.inner.last_record_copies.swap(v, Ordering::Relaxed);
        if durable < total && was != v {
            tracing::warn!(
                "journal record written to {durable} of its {total} copies: the meta-data is degraded until \
                 its copies are placed on healthy devices"
            );
        }
    }

    /// The copies the pool keeps now (None: unmanaged), with the
    /// superblock brought up to the layouts noted since.
    fn wanted(&self, m: &mut MetaState) -> Option<u32> {
        let t = self.inner.meta_survives.load(Ordering::Relaxed);
        if t == UNMANAGED {
            return None;
        }
        let t8 = t.min(u8::MAX as u32 - 1) as u8;
        if m.sb.meta_survives.is_none_or(|s| s < t8) {
            m.sb.meta_survives = Some(t8);
        }
        Some(meta_copies_wanted(self.active_devices(), t))
    }

    /// Whether nothing may move now: a device is being resilvered or
    /// emptied (those operations place the meta-data themselves).
    fn devices_changing(&self) -> bool {
        self.inner.storage.devs.iter().any(|d| matches!(d.state(), DeviceState::Resilvering | DeviceState::Evacuating))
    }

    /// Healthy devices without a copy among `holding`, most free space
    /// first.
    pub(super) fn spare_devices(&self, holding: &[u32]) -> Vec<u32> {
        let s = &self.inner.storage;
        let mut v: Vec<(u64, u32)> = s
            .devs
            .iter()
            .filter(|d| healthy(d.state()) && d.state().placeable() && !holding.contains(&d.index))
            .map(|d| (s.allocs.get(d.index as usize).map_or(0, |a| a.free_blocks()), d.index))
            .collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.into_iter().map(|(_, d)| d).collect()
    }

    /// The meta-file's copies as a list of devices, when its tree is the
    /// shape the pool makes (`meta_layout_on`: copies of one extent each).
    fn meta_file_devices(&self) -> Option<Vec<u32>> {
        made_by_pool(&self.inner.state.store().file().layout(), &self.pool_info())
    }

    /// Whether the meta-data has fewer copies than the pool keeps (or some
    /// on failed devices) and a healthy device could take one.
    pub(super) fn copies_short(&self, m: &mut MetaState) -> bool {
        let Some(want) = self.wanted(m) else { return false };
        if self.devices_changing() {
            return false;
        }
        let state = |d: u32| self.inner.storage.devs.get(d as usize).map_or(DeviceState::Missing, |h| h.state());
        let journal: Vec<u32> = m.sb.journals().iter().map(|r| r.dev).collect();
        let short = |devs: &[u32]| {
            let ok = devs.iter().filter(|&&d| healthy(state(d))).count() as u32;
            ok < want && !self.spare_devices(devs).is_empty()
        };
        short(&journal) || self.meta_file_devices().is_some_and(|d| short(&d))
    }

    /// Before a checkpoint: a new tree for the meta-file when its copies
    /// fall short and healthy devices can take more (the checkpoint copies
    /// it there).
    pub(super) fn plan_meta_file(&self, m: &mut MetaState) {
        let Some(want) = self.wanted(m) else { return };
        if m.relayout.is_some() || self.devices_changing() {
            return;
        }
        let Some(devs) = self.meta_file_devices() else { return };
        let state = |d: u32| self.inner.storage.devs.get(d as usize).map_or(DeviceState::Missing, |h| h.state());
        let mut keep: Vec<u32> = devs.iter().copied().filter(|&d| healthy(state(d))).collect();
        if keep.len() as u32 >= want {
            return;
        }
        let spare = self.spare_devices(&devs);
        if spare.is_empty() {
            return;
        }
        let add = (want as usize - keep.len()).min(spare.len());
        keep.extend(&spare[..add]);
        let text = meta_layout_on(&keep);
        match crate::layout::parse(&text).and_then(|s| crate::layout::resolve(&s, &self.pool_info())) {
            Ok(spec) => {
                tracing::info!("meta-file: copies on devices {devs:?} become {keep:?}");
                m.relayout = Some(spec);
            }
            Err(e) => tracing::warn!("meta-file: no new tree {text}: {e}"),
        }
    }

    /// Right after a durable checkpoint (the journal is empty and the
    /// meta-data lock keeps commits out): a journal copy on each healthy
    /// device the copies are short of, in place of copies on failed
    /// devices, the superblocks written naming them.
    pub(super) fn place_journal(&self, m: &mut MetaState) -> Result<()> {
        let Some(want) = self.wanted(m) else { return Ok(()) };
        if self.devices_changing() || m.cursor.tail != m.cursor.head {
            return Ok(());
        }
        let s = &*self.inner.storage;
        let state = |d: u32| s.devs.get(d as usize).map_or(DeviceState::Missing, |h| h.state());
        let now = m.sb.journals();
        let devs: Vec<u32> = now.iter().map(|r| r.dev).collect();
        let (good, bad): (Vec<Region>, Vec<Region>) = now.iter().partition(|r| healthy(state(r.dev)));
        if good.len() as u32 >= want {
            return Ok(());
        }
        let blocks = now[0].blocks;
        let mut added = Vec::new();
        for d in self.spare_devices(&devs) {
            if (good.len() + added.len()) as u32 >= want {
                break;
            }
            let a = &s.allocs[d as usize];
            let start = match a.alloc_reserved(None, blocks) {
                Some((st, n)) if n == blocks => st,
                Some((st, n)) => {
                    a.free_now(st, n);
                    continue;
                }
                None => continue,
            };
            // Replay starts at the cursor: nothing there may look like a record.
            let tail = m.cursor.tail;
            let n = 4u64.min(blocks - tail);
            let h = &s.devs[d as usize];
            let zeroed = h.write_blocks(start + tail, &vec![0u8; n as usize * BLOCK_SIZE]).and_then(|_| h.flush());
            if let Err(e) = zeroed {
                a.free_now(start, blocks);
                tracing::warn!("journal copy on device {d} not made: {e}");
                continue;
            }
            added.push(Region { dev: d, start, blocks });
        }
        if added.is_empty() {
            return Ok(());
        }
        // Copies on failed devices give way to the new ones, as many as
        // were added; the rest stay named (their device may come back).
        let dropped: Vec<Region> = bad.iter().take(added.len()).copied().collect();
        let mut list: Vec<Region> = good.into_iter().chain(bad.iter().skip(added.len()).copied()).collect();
        list.extend(&added);
        let mut sb = m.sb.clone();
        sb.journal = list[0];
        sb.journal_copies = list[1..].to_vec();
        sb.generation += 1;
        if let Err(e) = s.write_superblocks(&sb) {
            for r in &added {
                s.allocs[r.dev as usize].free_now(r.start, r.blocks);
            }
            return Err(e);
        }
        m.sb = sb;
        for r in &dropped {
            if let Some(a) = s.allocs.get(r.dev as usize) {
                a.free_now(r.start, r.blocks);
            }
        }
        let on: Vec<u32> = list.iter().map(|r| r.dev).collect();
        tracing::info!("journal: copies on devices {devs:?} become {on:?}");
        Ok(())
    }
}

/// Device failures `lay` survives with the devices that are down now
/// counted as failed already.
fn meta_file_survives_now(lay: &Layout, state: &dyn Fn(u32) -> DeviceState) -> u32 {
    let down = |d: u32| !healthy(state(d));
    if lay.root().health(&down) == crate::blocks::Health::Lost {
        return 0;
    }
    let mut up: Vec<u32> = lay.nodes().iter().filter_map(|n| n.device()).filter(|&d| !down(d)).collect();
    up.sort_unstable();
    up.dedup();
    // At most one less than the healthy devices it is on (exact for the
    // copies the pool keeps), and no more than the whole tree survives.
    lay.failures_survived(MAX_META_COPIES).min((up.len() as u32).saturating_sub(1))
}

/// The devices of `lay`'s copies, when it is the shape the pool makes for
/// the meta-file (`meta_layout_on`: copies of one extent each).
pub(super) fn made_by_pool(lay: &Layout, info: &crate::layout::PoolInfo) -> Option<Vec<u32>> {
    let leaves: Vec<u32> = lay.nodes().iter().filter_map(|n| n.device()).collect();
    let made = crate::layout::parse(&meta_layout_on(&leaves)).ok()?;
    // The tree as written, wherever its devices stand (one being emptied
    // may be among them).
    let info = crate::layout::PoolInfo { retired: Vec::new(), ..info.clone() };
    let made = crate::layout::resolve(&made, &info).ok()?;
    (made == lay.spec()).then_some(leaves)
}

/// The device failures the layout `text` survives in the pool `info`
/// describes (0 when it does not resolve there).
pub(super) fn layout_survives(text: &str, info: &crate::layout::PoolInfo) -> u32 {
    crate::layout::parse(text)
        .and_then(|s| crate::layout::resolve(&s, info))
        .and_then(|s| Layout::build(&s))
        .map_or(0, |l| l.failures_survived(MAX_META_COPIES))
}
