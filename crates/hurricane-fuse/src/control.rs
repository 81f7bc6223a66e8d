//! The maintenance channel of a mount: `user.hurricane.control` on the
//! root. Setting it (root only) to a JSON [`Request`] starts a scrub, a
//! device replacement, addition or removal on a thread of the mount; reading it gives the
//! [`Status`] of the running or last job as JSON. `hurricane scrub` and
//! `hurricane device replace` on a mount point use it and show the progress.

use hurricane::device::{Device, FileDevice};
use hurricane::fs::{
    AddOptions, MigrateOptions, RemoveOptions, ReplaceOptions, ReplaceProgress, ScrubOptions, ScrubProgress,
    ScrubReport,
};
use hurricane::Fs;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub use hurricane::xattr::CONTROL as CONTROL_XATTR;

/// Where a mount keeps its scrub position (in the pool directory).
pub const SCRUB_POSITION_FILE: &str = "scrub.pos";

/// What a caller asks a mount to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    Scrub {
        repair: bool,
        /// Bytes per second at most.
        rate: Option<u64>,
        /// Continue from the saved position.
        resume: bool,
    },
    Replace {
        /// Device index, or its path as the pool lists it.
        old: String,
        /// Image file (made with the old device's size if missing) or block device.
        new: String,
        /// Rebuild from redundancy even if the old device reads.
        rebuild: bool,
        rate: Option<u64>,
    },
    /// Grow the pool by a device.
    Add {
        /// Image file (made with `size` bytes if missing) or block device.
        new: String,
        size: Option<u64>,
    },
    /// Move everything off a device and take it out of the pool.
    Remove {
        /// Device index, or its path as the pool lists it.
        dev: String,
    },
    /// Re-lay a file, or every file of a tree, out online.
    Migrate {
        /// Path inside the pool ("/" is the mount's root).
        path: String,
        /// The layout spec.
        layout: String,
        recursive: bool,
        rate: Option<u64>,
    },
    /// Move the scattered small-file blocks of a file, or of every file of
    /// a tree, back together (`colocate`).
    Regroup {
        /// Path inside the pool ("/" is the mount's root).
        path: String,
        recursive: bool,
    },
    /// Empty the pool's list of permanent errors (`hurricane status
    /// --clear-errors`).
    ClearErrors,
    /// A log cleaning pass.
    Clean {
        /// "cost-benefit" or "greedy".
        policy: String,
        /// Clean at most this many segments.
        segments: Option<u64>,
    },
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    #[default]
    Idle,
    Running,
    Done,
    Failed,
}

/// One file with unrecoverable data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostSummary {
    pub ino: u64,
    pub paths: Vec<String>,
    /// (offset, length) in bytes.
    pub ranges: Vec<(u64, u64)>,
}

/// A scrub's report, as the CLI prints it (offline and online alike).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ScrubSummary {
    pub files: u64,
    pub checked_blocks: u64,
    pub repaired_blocks: u64,
    pub bytes_read: u64,
    pub duration_s: f64,
    pub rate_bytes_per_s: f64,
    pub complete: bool,
    pub resumed: bool,
    pub rebuilt_devices: Vec<u32>,
    pub lost: Vec<LostSummary>,
    /// Meta-file blocks no copy holds (`ScrubReport::meta_lost_blocks`).
    #[serde(default)]
    pub meta_lost_blocks: u64,
}

impl From<&ScrubReport> for ScrubSummary {
    fn from(r: &ScrubReport) -> Self {
        ScrubSummary {
            files: r.files,
            checked_blocks: r.checked_blocks,
            repaired_blocks: r.repaired_blocks,
            bytes_read: r.bytes_read,
            duration_s: r.duration.as_secs_f64(),
            rate_bytes_per_s: r.rate,
            complete: r.complete,
            resumed: r.resumed_from.is_some(),
            rebuilt_devices: r.rebuilt.clone(),
            meta_lost_blocks: r.meta_lost_blocks,
            lost: r
                .lost
                .iter()
                .map(|f| LostSummary { ino: f.ino, paths: f.paths.clone(), ranges: f.ranges.clone() })
                .collect(),
        }
    }
}

/// The running or last job of a mount.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Counts jobs since the mount started (0: none yet).
    pub job: u64,
    pub state: JobState,
    /// "scrub" or "replace".
    pub what: String,
    /// "copy", "verify", "rebuild" or "scrub".
    pub phase: String,
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub checked_blocks: u64,
    pub repaired_blocks: u64,
    pub lost_blocks: u64,
    /// Replacement: bytes copied from the old device; removal: file bytes
    /// moved to other devices.
    pub copied_bytes: u64,
    /// Removal: files moved off the device.
    #[serde(default)]
    pub moved_files: u64,
    /// Add: the new device's number; removal: the device removed.
    #[serde(default)]
    pub device: Option<u32>,
    pub result: Option<ScrubSummary>,
    pub error: Option<String>,
}

impl Status {
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
    pub fn from_json(raw: &[u8]) -> Result<Status, String> {
        serde_json::from_slice(raw).map_err(|e| format!("maintenance status is not of this version: {e}"))
    }
    fn scrub_progress(&mut self, phase: &str, p: &ScrubProgress) {
        self.phase = phase.into();
        self.done_bytes = p.done_bytes;
        self.total_bytes = p.total_bytes;
        self.checked_blocks = p.checked_blocks;
        self.repaired_blocks = p.repaired_blocks;
        self.lost_blocks = p.lost_blocks;
    }
}

impl Request {
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }
    pub fn from_json(raw: &[u8]) -> Result<Request, String> {
        serde_json::from_slice(raw).map_err(|e| format!("not a maintenance request: {e}"))
    }
}

/// The jobs of one mount.
pub struct Control {
    fs: Fs,
    pool_dir: PathBuf,
    status: Arc<Mutex<Status>>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Control {
    pub fn new(fs: Fs, pool_dir: PathBuf) -> Control {
        Control { fs, pool_dir, status: Default::default(), stop: Default::default(), thread: Mutex::new(None) }
    }

    pub fn status(&self) -> Status {
        self.status.lock().clone()
    }

    /// Starts the job `raw` asks for; refused while one runs.
    pub fn start(&self, raw: &[u8]) -> Result<(), String> {
        let req = Request::from_json(raw)?;
        let mut st = self.status.lock();
        if st.state == JobState::Running {
            return Err(format!("a {} is already running", st.what));
        }
        let job = st.job + 1;
        let what = match req {
            Request::Scrub { .. } => "scrub",
            Request::Replace { .. } => "replace",
            Request::Add { .. } => "add",
            Request::Remove { .. } => "remove",
            Request::Migrate { .. } => "migrate",
            Request::Clean { .. } => "clean",
            Request::Regroup { .. } => "regroup",
            Request::ClearErrors => "clear-errors",
        };
        *st = Status { job, state: JobState::Running, what: what.into(), ..Default::default() };
        drop(st);
        let (fs, dir, status, stop) = (self.fs.clone(), self.pool_dir.clone(), self.status.clone(), self.stop.clone());
        stop.store(false, Ordering::Relaxed);
        let h = std::thread::Builder::new()
            .name("hurricane-maint".into())
            .spawn(move || {
                // Started by whichever queue thread took the request: off
                // its CPU, so the job's workers use them all.
                hurricane::affinity::widen();
                let r = run(&fs, &dir, &req, &status, &stop);
                let mut st = status.lock();
                match r {
                    Ok(summary) => {
                        st.state = JobState::Done;
                        st.result = summary;
                    }
                    Err(e) => {
                        tracing::error!("{} failed: {e}", st.what);
                        st.state = JobState::Failed;
                        st.error = Some(e);
                    }
                }
            })
            .map_err(|e| format!("cannot start the job thread: {e}"))?;
        *self.thread.lock() = Some(h);
        Ok(())
    }

    /// Stops a running job (its position is kept) and waits for it: the
    /// mount calls this before closing the pool.
    pub fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.thread.lock().take() {
            let _ = h.join();
        }
    }
}

fn run(
    fs: &Fs,
    dir: &Path,
    req: &Request,
    status: &Mutex<Status>,
    stop: &Arc<AtomicBool>,
) -> Result<Option<ScrubSummary>, String> {
    let posf = dir.join(SCRUB_POSITION_FILE);
    match req {
        Request::Scrub { repair, rate, resume } => {
            let opts = ScrubOptions {
                repair: *repair,
                rate: *rate,
                position_file: Some(posf),
                resume: *resume,
                stop: Some(stop.clone()),
                ..Default::default()
            };
            let r = fs.scrub(&opts, &|p| status.lock().scrub_progress("scrub", p)).map_err(|e| e.to_string())?;
            Ok(Some(ScrubSummary::from(&r)))
        }
        Request::Replace { old, new, rebuild, rate } => {
            let old = resolve_device(fs, old)?;
            let size = fs.storage().devs[old as usize].blocks() * 4096;
            let (dev, new_path) = open_replacement(fs, new, old, size)?;
            let opts = ReplaceOptions {
                pool_dir: Some(dir.to_path_buf()),
                new_path: Some(new_path),
                rebuild: *rebuild,
                scrub: ScrubOptions {
                    rate: *rate,
                    position_file: Some(posf),
                    resume: true,
                    stop: Some(stop.clone()),
                    ..Default::default()
                },
            };
            let r = fs
                .replace_device(old, dev, &opts, &|p| {
                    let mut st = status.lock();
                    match p {
                        ReplaceProgress::Copy { done, total } => {
                            st.phase = "copy".into();
                            st.done_bytes = *done;
                            st.total_bytes = *total;
                            st.copied_bytes = *done;
                        }
                        ReplaceProgress::Rebuild(p) => st.scrub_progress("rebuild", p),
                        ReplaceProgress::Verify(p) => st.scrub_progress("verify", p),
                    }
                })
                .map_err(|e| e.to_string())?;
            status.lock().copied_bytes = r.copied_bytes;
            Ok(r.rebuild.as_ref().or(r.verify.as_ref()).map(ScrubSummary::from))
        }
        Request::Add { new, size } => {
            let size = size.unwrap_or_else(|| fs.storage().devs.iter().map(|d| d.blocks()).max().unwrap_or(0) * 4096);
            let (dev, path) = open_new(fs, new, fs.storage().device_count(), size)?;
            let opts = AddOptions { pool_dir: Some(dir.to_path_buf()), path: Some(path) };
            let i = fs.add_device(dev, &opts).map_err(|e| e.to_string())?;
            status.lock().device = Some(i);
            Ok(None)
        }
        Request::Remove { dev } => {
            let i = resolve_device(fs, dev)?;
            status.lock().device = Some(i);
            let opts = RemoveOptions { stop: Some(stop.clone()) };
            let r = fs
                .remove_device(i, &opts, &|p| {
                    let mut st = status.lock();
                    st.phase = "evacuate".into();
                    st.done_bytes = p.done_bytes;
                    st.total_bytes = p.total_bytes;
                    st.moved_files = p.files_done;
                })
                .map_err(|e| e.to_string())?;
            let mut st = status.lock();
            st.copied_bytes = r.bytes_copied;
            st.moved_files = r.files_moved;
            if !r.complete {
                return Err(format!("stopped before device {i} was empty: it is still evacuating"));
            }
            Ok(None)
        }
        Request::Migrate { path, layout, recursive, rate } => {
            let opts = MigrateOptions { rate: *rate, stop: Some(stop.clone()), ..Default::default() };
            let r = fs
                .migrate_tree(path, layout, *recursive, &opts, &|p| {
                    let mut st = status.lock();
                    st.phase = "migrate".into();
                    st.done_bytes = p.done_bytes;
                    st.total_bytes = p.total_bytes;
                    st.copied_bytes = p.copied_bytes;
                    st.moved_files = p.files_done;
                })
                .map_err(|e| e.to_string())?;
            let mut st = status.lock();
            st.copied_bytes = r.copied_bytes;
            st.moved_files = r.migrated;
            if !r.complete {
                return Err("stopped before every file was migrated: run it again to go on".into());
            }
            Ok(None)
        }
        Request::Regroup { path, recursive } => {
            let r = fs
                .regroup_tree(path, *recursive, Some(stop), &|p| {
                    let mut st = status.lock();
                    st.phase = "regroup".into();
                    st.done_bytes = p.files_done;
                    st.total_bytes = p.files_total;
                    st.copied_bytes = p.moved_blocks * 4096;
                    st.moved_files = p.regrouped;
                })
                .map_err(|e| e.to_string())?;
            let mut st = status.lock();
            st.copied_bytes = r.moved_blocks * 4096;
            st.moved_files = r.regrouped;
            if !r.complete {
                return Err("stopped before every file was looked at: run it again to go on".into());
            }
            Ok(None)
        }
        Request::ClearErrors => {
            let n = fs.clear_data_errors().map_err(|e| e.to_string())?;
            tracing::info!("cleared the permanent error list ({n} files)");
            Ok(None)
        }
        Request::Clean { policy, segments } => {
            let opts = hurricane::fs::CleanOptions {
                policy: policy.parse()?,
                max_segments: segments.map(|n| n as usize),
                stop: Some(stop.clone()),
                ..Default::default()
            };
            let r = fs
                .clean(&opts, &mut |p| {
                    let mut st = status.lock();
                    st.phase = "clean".into();
                    st.done_bytes = p.done;
                    st.total_bytes = p.total;
                    st.copied_bytes = p.moved_blocks * 4096;
                })
                .map_err(|e| e.to_string())?;
            let mut st = status.lock();
            st.copied_bytes = r.moved_blocks * 4096;
            st.moved_files = r.segments;
            Ok(None)
        }
    }
}

/// A device joining the pool at `path`: an image file made with `size`
/// bytes when there is none, else an existing file or block device.
pub fn open_new_device(path: &Path, size: u64) -> Result<Arc<dyn Device>, String> {
    let dev = if path.exists() { FileDevice::open(path, true) } else { FileDevice::create(path, size) };
    Ok(Arc::new(dev.map_err(|e| e.to_string())?))
}

/// A device of the pool by index or by the path it is known by.
pub fn resolve_device(fs: &Fs, old: &str) -> Result<u32, String> {
    let n = fs.storage().devs.len();
    if let Ok(i) = old.parse::<u32>() {
        return if (i as usize) < n { Ok(i) } else { Err(format!("device {i}: the pool has {n} devices")) };
    }
    let want = Path::new(old);
    let canon = want.canonicalize().ok();
    for d in &fs.storage().devs {
        let name = d.name();
        let p = Path::new(&name);
        if p == want || (canon.is_some() && p.canonicalize().ok() == canon) {
            return Ok(d.index);
        }
    }
    Err(format!("{old}: not a device of this pool"))
}

/// The new device `new` names for slot `index` of the pool `fs`: an
/// image file made with `size` bytes when there is none, an existing file
/// or block device, or a device in a Ceph cluster
/// (`rados:CEPHPOOL[/PREFIX]?conf=PATH[&size=SIZE]`, its objects named as
/// `hurricane::device::rados_spec::new_device` says, `size` bytes unless
/// it says). Returns it and what pool.conf calls it.
pub fn open_new(fs: &Fs, new: &str, index: u32, size: u64) -> Result<(Arc<dyn Device>, PathBuf), String> {
    if hurricane::device::is_rados(new) {
        let mut conns = fs.rados_connections();
        let (dev, spec) = hurricane::device::rados_spec::new_device(new, &fs.pool_id(), index, size, &mut conns)
            .map_err(|e| e.to_string())?;
        return Ok((dev, PathBuf::from(spec.to_string())));
    }
    let path = PathBuf::from(new);
    Ok((open_new_device(&path, size)?, path))
}

/// The replacement of device `index` (of `size` bytes) that `new` names,
/// as [`open_new`] opens it; refused if smaller.
pub fn open_replacement(fs: &Fs, new: &str, index: u32, size: u64) -> Result<(Arc<dyn Device>, PathBuf), String> {
    let (dev, name) = open_new(fs, new, index, size)?;
    if dev.size() < size {
        return Err(format!(
            "{}: {} bytes, smaller than the device it replaces ({size} bytes)",
            name.display(),
            dev.size()
        ));
    }
    Ok((dev, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_status_round_trip_and_refuse_garbage() {
        let r = Request::Replace { old: "1".into(), new: "/x.img".into(), rebuild: false, rate: Some(5) };
        assert_eq!(Request::from_json(&r.to_json()).unwrap(), r);
        let s = Request::Scrub { repair: true, rate: None, resume: false };
        assert_eq!(Request::from_json(&s.to_json()).unwrap(), s);
        assert!(Request::from_json(br#"{"op":"format"}"#).is_err());
        assert!(Request::from_json(br#"{"op":"scrub","repair":true,"rate":null,"resume":false,"x":1}"#).is_err());
        assert!(Request::from_json(b"scrub").is_err());
        let st = Status { job: 2, state: JobState::Running, what: "scrub".into(), ..Default::default() };
        assert_eq!(Status::from_json(&st.to_json()).unwrap(), st);
        assert!(Status::from_json(b"{}").is_err());
    }
}
