//! Online re-layout (`hurricane migrate`, `hurricane layout set
//! --migrate`, `setfattr -n user.hurricane.layout` on a file holding
//! data): a file's data moves to a new tree while programs keep reading
//! and writing it. Same inode, same open handles; the new tree becomes the
//! file's tree at one instant.
//!
//! How, and why it is safe:
//!
//! 1. The new tree is built from the spec and registered as the file's
//!    *migration*, under the file's I/O lock held exclusively. Nothing
//!    persistent names it: a checkpoint records its space as free (it is
//!    unreferenced if the pool stops before the switch), and an open after
//!    a crash finds the file whole in its old tree.
//! 2. The copy runs in chunks of [`CHUNK`] blocks in file order. Each chunk
//!    is read from the old tree and written to the new one while the I/O
//!    lock is held exclusively, so readers and writers of the file wait at
//!    most one chunk; the *watermark* (blocks below it are in both trees)
//!    then moves past the chunk. Blocks of zeros stay holes.
//! 3. Every change to the file while it migrates goes to the old tree and,
//!    for the part below the watermark, to the new one too (writes,
//!    truncates, punched holes, zeroed and preallocated ranges: each holds
//!    the I/O lock, exclusively for writes while a migration runs, so the
//!    two trees see the changes in the same order). What lies above the
//!    watermark is copied later. The new tree's records are kept with the
//!    migration, not journalled.
//! 4. The switch, under the I/O lock once the watermark has passed the end
//!    of the file: one journalled `SetLayout` with the new tree as built,
//!    followed by its records (the way an inline file is promoted and a
//!    device is evacuated). The migration is unregistered inside the same
//!    journal batch, so a checkpoint sees either the old tree in force and
//!    the new one free, or the new tree in force. The old tree's space is
//!    freed when that batch commits. Every change reads the file's tree
//!    under the I/O lock, so one that waited for the switch goes to the new
//!    tree (space it put in the dropped old tree would be owned by nothing).
//!
//! A write that cannot be mirrored (the new tree's devices are full, a
//! device fails) lands in the old tree and ends the migration with that
//! error; its space goes back. Deleting the file ends it too. A file that
//! changes tree meanwhile by other means (an inline file outgrowing its
//! node, a device removal moving it) ends it: run it again.

use super::Fs;
use crate::blocks::{IoCtx, Layout, NodeRecord, Spec, BLOCK_SIZE};
use crate::codec::Encoder;
use crate::error::{Error, Result};
use crate::journal::Ino;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BS: u64 = BLOCK_SIZE as u64;
/// File blocks copied while the file's I/O lock is held (1 MiB): the
/// longest a reader or writer of the file waits for the copy.
pub const CHUNK: u64 = 256;

/// How to migrate.
#[derive(Debug, Clone, Default)]
pub struct MigrateOptions {
    /// Bytes copied per second at most (None: as fast as the devices go).
    pub rate: Option<u64>,
    /// Set from elsewhere to stop between chunks: the file keeps its old
    /// tree and the copy's space goes back.
    pub stop: Option<Arc<AtomicBool>>,
    /// File blocks copied per turn of the I/O lock (0: [`CHUNK`]).
    pub chunk_blocks: u64,
}

/// Progress of one file's migration, after every chunk.
#[derive(Debug, Clone, Copy, Default)]
pub struct MigrateProgress {
    /// Bytes of the file below the watermark, and the file's size.
    pub done_bytes: u64,
    pub total_bytes: u64,
    /// Bytes of data read and written so far (holes are skipped).
    pub copied_bytes: u64,
}

/// What a migration did.
#[derive(Debug, Clone, Default)]
pub struct MigrateReport {
    /// The file had that layout already: nothing was copied.
    pub unchanged: bool,
    /// False when stopped before the switch (the old tree stays).
    pub complete: bool,
    pub copied_bytes: u64,
    pub duration: Duration,
    /// The layouts before and after.
    pub from: String,
    pub to: String,
}

/// A migration in progress, as `hurricane layout get` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationStatus {
    pub from: String,
    pub to: String,
    pub done_bytes: u64,
    pub total_bytes: u64,
}

impl std::fmt::Display for MigrationStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pct = if self.total_bytes == 0 { 100.0 } else { self.done_bytes as f64 * 100.0 / self.total_bytes as f64 };
        write!(
            f,
            "migrating from {} to {}: {} of {} bytes ({pct:.0}%)",
            self.from,
            self.to,
            self.done_bytes.min(self.total_bytes),
            self.total_bytes
        )
    }
}

/// A file's migration: the new tree and how far the copy has come.
pub(crate) struct Migration {
    fresh: Arc<Layout>,
    from: String,
    to: String,
    /// Blocks [0, watermark) of the file are in both trees.
    watermark: AtomicU64,
    /// The file's size when the last chunk was copied.
    total: AtomicU64,
    /// The new tree's records, installed with it at the switch.
    changes: Mutex<Vec<NodeRecord>>,
    /// Why the migration ended early (a change that could not be mirrored,
    /// the file deleted).
    failed: Mutex<Option<Error>>,
}

impl Migration {
    /// Blocks below the watermark.
    fn watermark(&self) -> u64 {
        self.watermark.load(Ordering::Acquire)
    }
}

/// Ends a migration and gives the new tree's space back, unless it was
/// installed.
struct Registered<'a> {
    fs: &'a Fs,
    ino: Ino,
    m: Arc<Migration>,
    installed: bool,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if self.installed {
            return;
        }
        let node = self.fs.state().get(self.ino);
        // Under the I/O lock, so no change is being mirrored into it.
        let _io = node.as_ref().map(|n| n.io.write());
        let mut reg = self.fs.inner.migrations.write();
        if reg.get(&self.ino).is_some_and(|m| Arc::ptr_eq(m, &self.m)) {
            reg.remove(&self.ino);
        }
        drop(reg);
        // Nothing persistent names the new tree: its space is freed as a
        // truncate frees (so it leaves the log's index where it has log
        // blocks), for reuse once the current batch commits.
        let io = IoCtx {
            owner: self.ino,
            origin: crate::blocks::Origin::NONE,
            storage: self.fs.storage(),
            epoch: self.fs.inner.gate.current_epoch(),
            sink: &crate::blocks::ignore_records,
            repair: false,
        };
        if self.m.fresh.root().truncate(&io, 0).is_err() {
            self.m.fresh.extents(&mut |d, s, l| {
                if let Some(a) = self.fs.storage().allocs.get(d as usize) {
                    a.free_now(s, l);
                }
            });
        }
    }
}

/// A spec as compared for "already laid out so": without the checksum
/// nodes the pool adds, and without devices unless `devices`.
fn shape(s: &Spec, devices: bool) -> Spec {
    if s.kind == "checksum" && s.children.len() == 1 {
        return shape(&s.children[0], devices);
    }
    Spec {
        kind: s.kind.clone(),
        params: s.params.clone(),
        children: s.children.iter().map(|c| shape(c, devices)).collect(),
        device: if devices { s.device } else { None },
    }
}

impl Fs {
    /// Re-lays file `ino` out as `spec` while it stays in use (module notes).
    pub fn migrate(
        &self,
        ino: Ino,
        spec: &str,
        opts: &MigrateOptions,
        progress: &dyn Fn(&MigrateProgress),
    ) -> Result<MigrateReport> {
        let t0 = Instant::now();
        self.check_writable()?;
        let (node, old, _) = self.file_layout(ino)?;
        let target = self.file_spec(spec)?;
        let from = old.spec();
        let named_devices = spec.contains('@');
        let mut report = MigrateReport { from: from.to_string(), to: target.to_string(), ..Default::default() };
        if shape(&from, named_devices) == shape(&target, named_devices) {
            report.unchanged = true;
            report.complete = true;
            report.to = report.from.clone();
            return Ok(report);
        }
        let fresh = Arc::new(Layout::build(&target)?);
        self.note_layout(&fresh);
        let mut e = Encoder::new();
        fresh.encode(&mut e);
        let encoded = e.into_inner();
        let m = Arc::new(Migration {
            fresh: fresh.clone(),
            from: report.from.clone(),
            to: report.to.clone(),
            watermark: AtomicU64::new(0),
            total: AtomicU64::new(node.data.read().size),
            changes: Mutex::new(Vec::new()),
            failed: Mutex::new(None),
        });
        {
            let _io = node.io.write();
            let mut reg = self.inner.migrations.write();
            if reg.contains_key(&ino) {
                return Err(Error::WouldBlock(format!("inode {ino} is being migrated already")));
            }
            reg.insert(ino, m.clone());
        }
        let mut reg = Registered { fs: self, ino, m: m.clone(), installed: false };
        let stop = || opts.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed));
        let rio = self.reader_io(ino);
        let sink = |c: NodeRecord| m.changes.lock().push(c);
        let chunk = if opts.chunk_blocks == 0 { CHUNK } else { opts.chunk_blocks.min(CHUNK) };
        let mut buf = vec![0u8; (chunk * BS) as usize];
        let mut p = MigrateProgress::default();
        loop {
            if stop() {
                report.duration = t0.elapsed();
                return Ok(report);
            }
            let started = Instant::now();
            let io = node.io.write();
            if let Some(e) = m.failed.lock().take() {
                return Err(e);
            }
            let (lay, size) = {
                let d = node.data.read();
                (d.layout()?.cloned(), d.size)
            };
            match lay {
                Some(l) if Arc::ptr_eq(&l, &old) => {}
                _ => {
                    return Err(Error::Stale(format!(
                        "inode {ino}: its tree changed during the migration (run it again)"
                    )))
                }
            }
            m.total.store(size, Ordering::Release);
            let end = size.div_ceil(BS);
            let w = m.watermark();
            let Some(start) = old.root().next_data(w).filter(|&s| s < end) else {
                // Everything is in the new tree: the switch.
                m.watermark.store(end.max(w), Ordering::Release);
                let g = self.inner.gate.enter();
                let changes = std::mem::take(&mut *m.changes.lock());
                self.install_layout(&g, ino, encoded, changes)?;
                reg.installed = true;
                self.inner.migrations.write().remove(&ino);
                // The old tree is dropped as a truncate drops blocks (so
                // blocks that keep a device-wide index, the log's, leave it),
                // its space free once the switch commits.
                let dropped = {
                    let io = IoCtx {
                        owner: ino,
                        origin: crate::blocks::Origin::NONE,
                        storage: self.storage(),
                        epoch: g.epoch(),
                        sink: &crate::blocks::ignore_records,
                        repair: false,
                    };
                    old.root().truncate(&io, 0)
                };
                if let Err(e) = dropped {
                    tracing::warn!("inode {ino}: dropping the old tree: {e}; freeing its extents");
                    old.extents(&mut |d, s, len| {
                        if let Some(a) = self.storage().allocs.get(d as usize) {
                            a.free_deferred(g.epoch(), s, len);
                        }
                    });
                }
                drop(g);
                self.inner.cache.invalidate_from(ino, 0);
                drop(io);
                p.done_bytes = size;
                p.total_bytes = size;
                progress(&p);
                tracing::info!("inode {ino}: migrated from {} to {} ({} bytes copied)", m.from, m.to, p.copied_bytes);
                report.complete = true;
                report.copied_bytes = p.copied_bytes;
                report.duration = t0.elapsed();
                return Ok(report);
            };
            let n = chunk.min(end - start);
            let part = &mut buf[..(n * BS) as usize];
            old.root()
                .read(&rio, start, part)
                .map_err(|e| Error::Device(format!("inode {ino}: reading blocks {start}+{n} to migrate them: {e}")))?;
            {
                let g = self.inner.gate.enter();
                let wio = self.writer_io(ino, g.epoch(), &sink, false);
                let zero = |k: u64| part[(k * BS) as usize..((k + 1) * BS) as usize].iter().all(|&x| x == 0);
                let mut k = 0;
                while k < n {
                    if zero(k) {
                        k += 1;
                        continue;
                    }
                    let run = (k..n).take_while(|&j| !zero(j)).count() as u64;
                    fresh.root().write(&wio, start + k, &part[(k * BS) as usize..((k + run) * BS) as usize])?;
                    k += run;
                }
            }
            m.watermark.store(start + n, Ordering::Release);
            drop(io);
            p.copied_bytes += n * BS;
            p.done_bytes = ((start + n) * BS).min(size);
            p.total_bytes = size;
            progress(&p);
            if let Some(rate) = opts.rate.filter(|&r| r > 0) {
                let want = Duration::from_secs_f64((n * BS) as f64 / rate as f64);
                if let Some(rest) = want.checked_sub(started.elapsed()) {
                    std::thread::sleep(rest);
                }
            }
        }
    }

    /// [`Fs::migrate`] by path.
    pub fn migrate_path(
        &self,
        path: &str,
        spec: &str,
        opts: &MigrateOptions,
        progress: &dyn Fn(&MigrateProgress),
    ) -> Result<MigrateReport> {
        self.migrate(self.resolve(path)?, spec, opts, progress)
    }

    /// The migration of `ino` in progress, if any.
    pub fn migration_status(&self, ino: Ino) -> Option<MigrationStatus> {
        let m = self.inner.migrations.read().get(&ino).cloned()?;
        let total = m.total.load(Ordering::Acquire);
        Some(MigrationStatus {
            from: m.from.clone(),
            to: m.to.clone(),
            done_bytes: (m.watermark() * BS).min(total),
            total_bytes: total,
        })
    }

    /// The migration of `ino`, for the paths that change its data.
    pub(crate) fn migration(&self, ino: Ino) -> Option<Arc<Migration>> {
        let reg = self.inner.migrations.read();
        if reg.is_empty() {
            return None;
        }
        reg.get(&ino).cloned()
    }

    /// Applies a change made to the old tree of a migrating file to its
    /// new tree as well (`f` on the new tree, in the batch `epoch`). A
    /// change that fails there ends the migration (the old tree has it).
    /// The caller holds the file's I/O lock.
    /// `f` is given the new tree, its context and the watermark (in blocks).
    pub(crate) fn mirror(&self, ino: Ino, epoch: u64, f: &dyn Fn(&Layout, &IoCtx, u64) -> Result<()>) {
        let Some(m) = self.migration(ino) else { return };
        let sink = |c: NodeRecord| m.changes.lock().push(c);
        let io =
            IoCtx { owner: ino, origin: self.origin(ino), storage: self.storage(), epoch, sink: &sink, repair: false };
        if let Err(e) = f(&m.fresh, &io, m.watermark()) {
            tracing::warn!("inode {ino}: migration to {} ended: a change could not be made in the new tree: {e}", m.to);
            self.end_migration(ino, || e);
        }
    }

    /// Ends the migration of `ino`, if one runs, with the error `why`
    /// makes (the copy gives its space back). Most files are not being
    /// migrated: for them this takes no write lock and makes no error.
    pub(crate) fn end_migration(&self, ino: Ino, why: impl FnOnce() -> Error) {
        if self.migration(ino).is_none() {
            return;
        }
        let m = self.inner.migrations.write().remove(&ino);
        if let Some(m) = m {
            m.failed.lock().get_or_insert_with(why);
        }
    }

    /// The space of every new tree being filled, which a checkpoint records
    /// as free (nothing persistent names it). Called with the gate closed.
    pub(crate) fn migrating_extents(&self, out: &mut Vec<(u32, u64, u64)>) {
        for m in self.inner.migrations.read().values() {
            m.fresh.extents(&mut |d, s, l| out.push((d, s, l)));
        }
    }
}

/// Progress of a tree's migration.
#[derive(Debug, Clone, Copy, Default)]
pub struct TreeProgress {
    pub files_done: u64,
    pub files_total: u64,
    /// Bytes of the files done, plus the current file's part below its
    /// watermark; the files' sizes in all.
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub copied_bytes: u64,
}

/// What a tree's migration did.
#[derive(Debug, Clone, Default)]
pub struct TreeReport {
    /// Files moved to the layout, and files that had it already.
    pub migrated: u64,
    pub unchanged: u64,
    pub copied_bytes: u64,
    /// False when stopped: the files not reached keep their layouts, and
    /// running it again goes on (files already so laid out are skipped).
    pub complete: bool,
    pub duration: Duration,
}

impl Fs {
    /// Migrates the regular file at `path`, or with `recursive` every
    /// regular file under the directory at `path`, to `spec`, one file at
    /// a time (the rate limit holds within each file, so over the tree).
    /// Files that already have the layout are skipped, which is how an
    /// interrupted run resumes.
    pub fn migrate_tree(
        &self,
        path: &str,
        spec: &str,
        recursive: bool,
        opts: &MigrateOptions,
        progress: &dyn Fn(&TreeProgress),
    ) -> Result<TreeReport> {
        let t0 = Instant::now();
        // The spec is checked before anything is walked.
        self.file_spec(spec)?;
        let files = self.regular_files(path, recursive, "migrate")?;
        let mut p = TreeProgress {
            files_total: files.len() as u64,
            total_bytes: files.iter().map(|f| f.2).sum(),
            ..Default::default()
        };
        progress(&p);
        let mut report = TreeReport::default();
        for (path, ino, size) in files {
            if opts.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
                report.duration = t0.elapsed();
                return Ok(report);
            }
            let base = p;
            let r = self.migrate(ino, spec, opts, &|f| {
                let mut q = base;
                q.done_bytes += f.done_bytes.min(size);
                q.copied_bytes += f.copied_bytes;
                progress(&q);
            });
            let r = match r {
                // Deleted or replaced by another file meanwhile: nothing to move.
                Err(Error::NotFound(_)) | Err(Error::Stale(_)) if self.resolve(&path).map_or(true, |i| i != ino) => {
                    p.files_done += 1;
                    p.done_bytes += size;
                    continue;
                }
                r => r.map_err(|e| Error::Invalid(format!("{path}: {e}")))?,
            };
            if !r.complete {
                report.copied_bytes += r.copied_bytes;
                report.duration = t0.elapsed();
                return Ok(report);
            }
            if r.unchanged {
                report.unchanged += 1;
            } else {
                report.migrated += 1;
            }
            report.copied_bytes += r.copied_bytes;
            p.files_done += 1;
            p.done_bytes += size;
            p.copied_bytes += r.copied_bytes;
            progress(&p);
        }
        report.complete = true;
        report.duration = t0.elapsed();
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Device, MemDevice};
    use crate::{FormatOptions, Options};

    /// A preallocation that read the file's tree before a migration's
    /// switch and got the file's I/O lock after it puts its space in the
    /// new tree, not in the old one the switch dropped (where nothing would
    /// own it).
    #[test]
    fn a_preallocation_waiting_for_the_migrate_switch_lands_in_the_new_tree() {
        let devs: Vec<Arc<dyn Device>> =
            (0..2).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), 64 << 20)) as Arc<dyn Device>).collect();
        Fs::format(devs.clone(), &FormatOptions::default()).unwrap();
        let open = || Fs::open(devs.clone(), Options { background_commit: false, ..Options::default() }).unwrap();
        let fs = open();
        let data: Vec<u8> = (0..100 * BLOCK_SIZE).map(|i| (i % 251) as u8 | 1).collect();
        fs.write_file("/f", &data, Some("extent@0")).unwrap();
        let ino = fs.resolve("/f").unwrap();
        // A hole in blocks [40, 60) for the preallocation to fill.
        fs.fallocate(ino, 40 * BS, 20 * BS, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE).unwrap();
        fs.sync().unwrap();
        let node = fs.state().inode(ino).unwrap();
        let (_, old, _) = fs.file_layout(ino).unwrap();
        let (copied, held) = (AtomicBool::new(false), AtomicBool::new(false));
        std::thread::scope(|s| {
            let mover = s.spawn(|| {
                let opts = MigrateOptions { chunk_blocks: 64, ..Default::default() };
                fs.migrate(ino, "extent@1", &opts, &|p| {
                    if p.done_bytes == p.total_bytes {
                        // Copied: the switch comes next, once the lock is free.
                        copied.store(true, Ordering::Release);
                        while !held.load(Ordering::Acquire) {
                            std::thread::yield_now();
                        }
                    }
                })
            });
            while !copied.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            let reader = node.io.read();
            held.store(true, Ordering::Release);
            // The mover waits for the lock to switch; readers queue behind it.
            while !node.io.is_locked_exclusive() {
                std::thread::yield_now();
            }
            let prealloc = s.spawn(|| fs.fallocate(ino, 40 * BS, 20 * BS, libc::FALLOC_FL_KEEP_SIZE));
            // Time for the preallocation to start and queue for the lock.
            std::thread::sleep(Duration::from_millis(200));
            drop(reader);
            let r = mover.join().unwrap().unwrap();
            assert!(r.complete, "{r:?}");
            prealloc.join().unwrap().unwrap();
        });
        assert!(fs.layout_of("/f").unwrap().contains("extent@1"));
        let (_, lay, _) = fs.file_layout(ino).unwrap();
        assert_eq!(lay.root().next_data(40), Some(40), "the preallocated space is not in the new tree");
        // The dropped old tree holds no space (nothing names it).
        let mut kept = Vec::new();
        old.extents(&mut |d, s, l| kept.push((d, s, l)));
        assert!(kept.is_empty(), "space put in the old tree after the switch: {kept:?}");
        let mut want = data.clone();
        want[40 * BLOCK_SIZE..60 * BLOCK_SIZE].fill(0);
        assert!(fs.read_file("/f").unwrap() == want);
        assert!(fs.report().double_claims.is_empty());
        fs.close().unwrap();
        let fs = open();
        assert!(fs.layout_of("/f").unwrap().contains("extent@1"));
        assert!(fs.read_file("/f").unwrap() == want);
        fs.close().unwrap();
    }
}
