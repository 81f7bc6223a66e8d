//! `hurricane scrub`, `hurricane migrate` and `hurricane device replace|add|remove`: offline on a pool
//! directory, online on a mount point (through the mount's
//! `user.hurricane.control`, see hurricane_fuse::control), with a progress
//! bar either way.

use crate::util::{bytes_bar, files_bar, parse_size, CliResult, Fail, PoolLock};
use clap::{Args, Subcommand};
use hurricane::fs::{AddOptions, MigrateOptions, RemoveOptions, ReplaceOptions, ReplaceProgress, ScrubOptions};
use hurricane::units::human;
use hurricane::{Fs, Options};
use hurricane_fuse::control::{
    open_new, open_replacement, resolve_device, JobState, Request, ScrubSummary, Status, CONTROL_XATTR,
    SCRUB_POSITION_FILE,
};
use indicatif::ProgressBar;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Exit status when a scrub found data no copy could supply.
pub const EXIT_LOST: i32 = 4;

#[derive(Args, Debug)]
#[command(after_help = "Offline (POOL): opens the pool read-write (read-only with --no-repair). \
Online (MOUNTPOINT): the mount runs the scrub; this command shows its progress and waits. \
An interrupted scrub continues where it stopped (the position is kept in POOL/scrub.pos) unless --restart. \
A scrub also finishes the resilver of a replaced device.\n\
Exit status: 0 everything verified (repairs included); 1 the scrub could not run or was stopped; \
4 some data is unrecoverable (the files are listed).")]
pub struct ScrubArgs {
    /// Pool directory or mount point.
    #[arg(value_parser = crate::util::pool_arg)]
    pub target: PathBuf,
    /// Verify at most this many bytes per second (e.g. 100M).
    #[arg(long, value_parser = parse_size)]
    pub rate: Option<u64>,
    /// Only report: rewrite nothing.
    #[arg(long)]
    pub no_repair: bool,
    /// Start from the beginning even if an earlier scrub was interrupted.
    #[arg(long)]
    pub restart: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
#[command(after_help = "Files move to the new layout while programs keep reading and writing them: \
the data is copied in the background a megabyte at a time, changes during the copy go to both \
layouts, and the new layout takes over at one instant (same inode, same open files). \
Online (a path on a mount, root only) the mount runs the job and this command shows its progress; \
offline (POOL_DIR PATH) it runs here. A file stopped or cut by a crash keeps its old layout; \
running the command again skips the files that have the new one.")]
pub struct MigrateArgs {
    /// POOL_DIR PATH, or a path on a mounted pool.
    #[arg(num_args = 1..=2, required = true, value_names = ["POOL_DIR|MOUNTED_PATH", "PATH"])]
    pub args: Vec<PathBuf>,
    /// The new layout spec (e.g. stripe(unit=1M,width=4)); a table's
    /// `map=@FILE` reads its ranges from a local file.
    #[arg(long, value_parser = crate::util::spec_arg)]
    pub layout: String,
    /// Migrate every regular file under a directory.
    #[arg(short, long)]
    pub recursive: bool,
    /// Copy at most this many bytes per second (e.g. 100M).
    #[arg(long, value_parser = parse_size)]
    pub rate: Option<u64>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn migrate(a: &MigrateArgs) -> CliResult {
    hurricane::layout::parse(&a.layout)?;
    let (files, bytes) = match a.args.as_slice() {
        [pool, path] => {
            let pool = &crate::util::pool_arg(&pool.to_string_lossy())?;
            let path = crate::files::abs(&path.to_string_lossy());
            let opts = MigrateOptions { rate: a.rate, ..Default::default() };
            let r = offline(pool, true, "migrate", |fs, bar| {
                Ok(fs.migrate_tree(&path, &a.layout, a.recursive, &opts, &|p| bar(p.done_bytes, p.total_bytes))?)
            })?;
            (r.migrated, r.copied_bytes)
        }
        [mounted] => {
            let (root, path) = mount_of(mounted)?;
            let req = Request::Migrate { path, layout: a.layout.clone(), recursive: a.recursive, rate: a.rate };
            let st = online(&root, &req)?;
            (st.moved_files, st.copied_bytes)
        }
        _ => return Err(Fail::code(2, "migrate takes POOL_DIR PATH, or MOUNTED_PATH")),
    };
    if a.json {
        println!("{}", serde_json::json!({ "files_migrated": files, "bytes_copied": bytes }));
    } else {
        println!("migrated {files} files ({} copied) to {}", human(bytes), a.layout);
    }
    Ok(())
}

#[derive(Args, Debug)]
#[command(after_help = "A `colocate` file keeps its first blocks in the group of its directory (or owner). \
A file that grew in steps while its neighbours took the blocks beside it, or that was renamed into another \
directory, can end up with them scattered over several groups (`hurricane fsck` notes such files); this moves \
them back together, into the group of the directory the file is in now, every byte kept. Files that are \
together, or have no `colocate` node, are left alone. Online (a path on a mount, root only) the mount runs \
the job; offline (POOL_DIR PATH) it runs here.")]
pub struct RegroupArgs {
    /// POOL_DIR PATH, or a path on a mounted pool.
    #[arg(num_args = 1..=2, required = true, value_names = ["POOL_DIR|MOUNTED_PATH", "PATH"])]
    pub args: Vec<PathBuf>,
    /// Regroup every regular file under a directory.
    #[arg(short, long)]
    pub recursive: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn regroup(a: &RegroupArgs) -> CliResult {
    let (files, regrouped, blocks) = match a.args.as_slice() {
        [pool, path] => {
            let pool = &crate::util::pool_arg(&pool.to_string_lossy())?;
            let path = crate::files::abs(&path.to_string_lossy());
            let r = offline_with(pool, true, files_bar(0, "regroup"), |fs, bar| {
                Ok(fs.regroup_tree(&path, a.recursive, None, &|p| bar(p.files_done, p.files_total))?)
            })?;
            (r.files, r.regrouped, r.moved_blocks)
        }
        [mounted] => {
            let (root, path) = mount_of(mounted)?;
            let st = online(&root, &Request::Regroup { path, recursive: a.recursive })?;
            // The job reports files where the byte jobs report bytes.
            (st.total_bytes, st.moved_files, st.copied_bytes / 4096)
        }
        _ => return Err(Fail::code(2, "regroup takes POOL_DIR PATH, or MOUNTED_PATH")),
    };
    if a.json {
        println!("{}", serde_json::json!({ "files": files, "files_regrouped": regrouped, "blocks_moved": blocks }));
    } else {
        println!("regrouped {regrouped} of {files} files ({blocks} blocks moved)");
    }
    Ok(())
}

#[derive(clap::Args, Debug)]
#[command(after_help = "Moves the live blocks of `log` segments to the head so the segments are clean again. \
The cleaner also runs by itself when a device's clean segments run low; this runs a pass now. \
Online (the root of a mount, root only) the mount runs it; offline (POOL_DIR) it runs here.")]
pub struct CleanArgs {
    /// A pool directory, or the root of a mount.
    #[arg(value_parser = crate::util::pool_arg)]
    pub target: PathBuf,
    /// Which segments first: cost-benefit ((1-u)*age/(1+u)) or greedy (emptiest).
    #[arg(long, default_value = "cost-benefit", value_parser = ["cost-benefit", "greedy"])]
    pub policy: String,
    /// Clean at most this many segments.
    #[arg(long)]
    pub segments: Option<u64>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn clean(a: &CleanArgs) -> CliResult {
    let policy: hurricane::fs::CleanPolicy = a.policy.parse().map_err(Fail::new)?;
    let (segments, moved) = if is_pool(&a.target) {
        let opts =
            hurricane::fs::CleanOptions { policy, max_segments: a.segments.map(|n| n as usize), ..Default::default() };
        let r =
            offline(&a.target, true, "clean", |fs, bar| Ok(fs.clean(&opts, &mut |p| bar(p.moved_blocks * 4096, 0))?))?;
        (r.segments, r.moved_blocks * 4096)
    } else {
        let req = Request::Clean { policy: a.policy.clone(), segments: a.segments };
        let st = online(&a.target, &req)?;
        (st.moved_files, st.copied_bytes)
    };
    if a.json {
        println!("{}", serde_json::json!({ "segments_cleaned": segments, "bytes_moved": moved }));
    } else {
        println!("cleaned {segments} segments ({} of live data moved)", human(moved));
    }
    Ok(())
}

/// The Hurricane mount holding `p`: its mount point and `p`'s path inside it.
pub fn mount_of(p: &Path) -> CliResult<(PathBuf, String)> {
    let path = std::fs::canonicalize(p).map_err(|e| Fail::new(format!("{}: {e}", p.display())))?;
    let m = hurricane_fuse::mountinfo::mounts()
        .into_iter()
        .filter(|m| m.is_fuse() && path.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len())
        .ok_or_else(|| Fail::new(format!("{}: not on a mounted Hurricane pool (nor POOL_DIR PATH)", p.display())))?;
    let rel = path.strip_prefix(&m.mount_point).unwrap_or(Path::new(""));
    Ok((m.mount_point.clone(), format!("/{}", rel.to_string_lossy())))
}

#[derive(Subcommand, Debug)]
pub enum DeviceCmd {
    /// Replace device OLD (index or path) with NEW (image file, made with
    /// OLD's size if missing, or block device): copies OLD if it reads,
    /// else rebuilds it from redundancy (resilver).
    Replace(ReplaceArgs),
    /// Grow the pool by NEW (an image file, made with --size or the size of
    /// the largest device if missing, or a block device). New files spread
    /// onto it at once; existing files stay where they are.
    Add(AddArgs),
    /// Move every file with a piece on DEV (index or path) to the other
    /// devices, then take DEV out of the pool (its number is not reused).
    Remove(RemoveArgs),
}

#[derive(Args, Debug)]
pub struct AddArgs {
    /// Pool directory or mount point.
    #[arg(value_parser = crate::util::pool_arg)]
    pub target: PathBuf,
    /// The new device: an image file, a block device, or a device in a
    /// Ceph cluster, `rados:CEPHPOOL[/PREFIX]?conf=PATH[&size=SIZE]`.
    pub new: PathBuf,
    /// Size of a new image file (e.g. 10G).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<u64>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
#[command(after_help = "The device is marked evacuating first: nothing new is placed on it. \
Files are moved one at a time, online (each stays in use while it moves); redundant files on a \
missing or failing device are rebuilt from their other pieces. An interrupted removal (stopped, \
or a crash) goes on when the command is run again. The journal's and the meta-data's copies on \
the device move too, which needs a device besides the one holding the other copy.")]
pub struct RemoveArgs {
    /// Pool directory or mount point.
    #[arg(value_parser = crate::util::pool_arg)]
    pub target: PathBuf,
    /// The device to remove: its index or its path.
    pub dev: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
#[command(after_help = "A replacement interrupted during its resilver resumes with \
`hurricane device replace --resume POOL` (or any `hurricane scrub POOL`). \
Files with no redundancy on a lost device are listed as unrecoverable (exit status 4).")]
pub struct ReplaceArgs {
    /// Pool directory or mount point.
    #[arg(value_parser = crate::util::pool_arg)]
    pub target: PathBuf,
    /// The device replaced: its index or its path.
    pub old: Option<String>,
    /// The new device: an image file, a block device, or a device in a
    /// Ceph cluster, `rados:CEPHPOOL[/PREFIX]?conf=PATH[&size=SIZE]` (its
    /// objects named after the pool id, the device's index and, for a
    /// replacement, the first free generation: `hurricane.ID.INDEX.K`).
    pub new: Option<PathBuf>,
    /// Rebuild from redundancy even if OLD still reads.
    #[arg(long)]
    pub rebuild: bool,
    /// Finish an interrupted replacement (no OLD or NEW).
    #[arg(long)]
    pub resume: bool,
    /// Rebuild at most this many bytes per second (e.g. 100M).
    #[arg(long, value_parser = parse_size)]
    pub rate: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn device(c: &DeviceCmd) -> CliResult {
    match c {
        DeviceCmd::Replace(a) => replace(a),
        DeviceCmd::Add(a) => add(a),
        DeviceCmd::Remove(a) => remove(a),
    }
}

/// `device add POOL|MOUNT NEW`: NEW an image file (made with `--size`, or
/// the size of the pool's largest device, if missing), a block device, or
/// a device in a Ceph cluster (`rados:CEPHPOOL[/PREFIX]?conf=PATH[&size=SIZE]`,
/// its objects named as `rados_spec::new_device` says), offline or through
/// the mount.
fn add(a: &AddArgs) -> CliResult {
    let rados = a.new.to_str().is_some_and(hurricane::device::is_rados);
    let new = match rados {
        true => a.new.clone(),
        false => std::path::absolute(&a.new).map_err(|e| Fail::new(format!("{}: {e}", a.new.display())))?,
    };
    let name = new.to_string_lossy().into_owned();
    let (index, listed) = if is_pool(&a.target) {
        let dir = &a.target;
        if !rados && hurricane::pool::device_paths(dir)?.iter().any(|p| same_file(p, &new)) {
            return Err(Fail::new(format!("{}: already a device of this pool", new.display())));
        }
        let _lock = PoolLock::take(dir, true)?;
        let created = !rados && !new.exists();
        let fs = Fs::open_dir(dir, Options::default())?;
        let index = fs.storage().device_count();
        let largest = fs.storage().devs.iter().map(|d| d.dev().size()).max().unwrap_or(0);
        let r = open_new(&fs, &name, index, a.size.unwrap_or(largest)).map_err(Fail::new).and_then(|(dev, path)| {
            let opts = AddOptions { pool_dir: Some(dir.clone()), path: Some(path.clone()) };
            Ok((fs.add_device(dev, &opts)?, path))
        });
        let c = fs.close();
        if r.is_err() && created {
            // Nothing refers to an image this command made.
            let _ = std::fs::remove_file(&new);
        }
        let (i, path) = r?;
        c.map_err(|e| Fail::new(format!("closing the pool: {e}")))?;
        (i, path.display().to_string())
    } else {
        let st = online(&a.target, &Request::Add { new: name.clone(), size: a.size })?;
        (st.device.ok_or_else(|| Fail::new("the mount did not say which device was added"))?, name)
    };
    if a.json {
        println!("{}", serde_json::json!({ "device": index, "path": listed }));
    } else {
        println!("added device {index}: {listed}");
    }
    Ok(())
}

/// Runs `job` on the pool directory `dir` opened (writable or not) under
/// its lock, with a byte progress bar that `job` moves through its
/// `(done, total)` callback; closes the pool either way.
fn offline<R>(
    dir: &Path,
    writable: bool,
    what: &str,
    job: impl FnOnce(&Fs, &dyn Fn(u64, u64)) -> CliResult<R>,
) -> CliResult<R> {
    offline_with(dir, writable, bytes_bar(0, what), job)
}

/// `offline`, its progress shown on `pb` (done, total).
fn offline_with<R>(
    dir: &Path,
    writable: bool,
    pb: ProgressBar,
    job: impl FnOnce(&Fs, &dyn Fn(u64, u64)) -> CliResult<R>,
) -> CliResult<R> {
    let _lock = PoolLock::take(dir, writable)?;
    let fs = Fs::open_dir(dir, Options { read_only: !writable, ..Options::default() })?;
    let r = job(&fs, &|done, total| {
        pb.set_length(total);
        pb.set_position(done);
    });
    pb.finish_and_clear();
    let c = fs.close();
    let r = r?;
    c.map_err(|e| Fail::new(format!("closing the pool: {e}")))?;
    Ok(r)
}

fn remove(a: &RemoveArgs) -> CliResult {
    let (dev, files, bytes) = if is_pool(&a.target) {
        let (dev, r) = offline(&a.target, true, "evacuate", |fs, bar| {
            let dev = resolve_device(fs, &a.dev)?;
            Ok((dev, fs.remove_device(dev, &RemoveOptions::default(), &|p| bar(p.done_bytes, p.total_bytes))?))
        })?;
        if r.resumed && !a.json {
            println!("resumed the evacuation of device {dev}");
        }
        (dev, r.files_moved, r.bytes_copied)
    } else {
        let st = online(&a.target, &Request::Remove { dev: a.dev.clone() })?;
        let dev = st.device.ok_or_else(|| Fail::new("the mount did not say which device was removed"))?;
        (dev, st.moved_files, st.copied_bytes)
    };
    if a.json {
        println!("{}", serde_json::json!({ "device": dev, "files_moved": files, "bytes_copied": bytes }));
    } else {
        println!("removed device {dev}: moved {files} files ({}) to the other devices", human(bytes));
    }
    Ok(())
}

fn is_pool(p: &Path) -> bool {
    p.join(hurricane::pool::POOL_FILE).is_file()
}

pub fn scrub(a: &ScrubArgs) -> CliResult {
    let summary = if is_pool(&a.target) {
        let writable = !a.no_repair;
        let opts = ScrubOptions {
            repair: writable,
            rate: a.rate,
            position_file: Some(a.target.join(SCRUB_POSITION_FILE)),
            resume: !a.restart,
            ..Default::default()
        };
        let r = offline(&a.target, writable, "scrub", |fs, bar| {
            Ok(fs.scrub(&opts, &|p| bar(p.done_bytes, p.total_bytes))?)
        })?;
        ScrubSummary::from(&r)
    } else {
        let req = Request::Scrub { repair: !a.no_repair, rate: a.rate, resume: !a.restart };
        let st = online(&a.target, &req)?;
        st.result.ok_or_else(|| Fail::new("the mount's scrub gave no report"))?
    };
    report(&summary, a.json)
}

fn replace(a: &ReplaceArgs) -> CliResult {
    if a.resume {
        if a.old.is_some() || a.new.is_some() {
            return Err(Fail::code(2, "--resume takes only the pool"));
        }
        if !is_pool(&a.target) {
            // A mount finishes a resilver with a scrub.
            let st = online(&a.target, &Request::Scrub { repair: true, rate: a.rate, resume: true })?;
            let s = st.result.ok_or_else(|| Fail::new("the mount's scrub gave no report"))?;
            return report(&s, a.json);
        }
        let _lock = PoolLock::take(&a.target, true)?;
        let fs = Fs::open_dir(&a.target, Options::default())?;
        if fs.resilvering().is_empty() {
            fs.close()?;
            println!("no replacement to resume");
            return Ok(());
        }
        let s = resilver(&fs, &a.target, a.rate);
        let c = fs.close();
        let s = s?;
        c.map_err(|e| Fail::new(format!("closing the pool: {e}")))?;
        return report(&s, a.json);
    }
    let (Some(old), Some(new)) = (&a.old, &a.new) else {
        return Err(Fail::code(2, "device replace needs OLD and NEW (or --resume)"));
    };
    // A device in a Ceph cluster is named, not a path.
    let rados = new.to_str().filter(|n| hurricane::device::is_rados(n)).map(str::to_string);
    let new = match &rados {
        Some(n) => PathBuf::from(n),
        None => std::path::absolute(new).map_err(|e| Fail::new(format!("{}: {e}", new.display())))?,
    };
    if !is_pool(&a.target) {
        let req = Request::Replace {
            old: old.clone(),
            new: new.to_string_lossy().into_owned(),
            rebuild: a.rebuild,
            rate: a.rate,
        };
        let st = online(&a.target, &req)?;
        return report_replace(st.copied_bytes, st.result.as_ref(), a.json);
    }
    let dir = &a.target;
    let paths = hurricane::pool::device_paths(dir)?;
    let idx = device_index(&paths, old)?;
    let old_path = &paths[idx as usize];
    if paths.iter().any(|p| same_file(p, &new)) {
        return Err(Fail::new(format!("{}: already a device of this pool", new.display())));
    }
    let lock = PoolLock::take(dir, true)?;
    let new_name = new.to_string_lossy().into_owned();
    if let Ok(old_dev) = hurricane::pool::open_device(old_path, false) {
        // The pool opens with it: copy it (or rebuild, if asked or failing).
        let size = old_dev.size();
        drop(old_dev);
        let fs = Fs::open_dir(dir, Options::default())?;
        let (dev, new) = match open_replacement(&fs, &new_name, idx, size) {
            Ok(x) => x,
            Err(e) => {
                let _ = fs.close();
                return Err(Fail::new(e));
            }
        };
        let pb = bytes_bar(0, "replace");
        let opts = ReplaceOptions {
            pool_dir: Some(dir.clone()),
            new_path: Some(new.clone()),
            rebuild: a.rebuild,
            scrub: ScrubOptions {
                rate: a.rate,
                position_file: Some(dir.join(SCRUB_POSITION_FILE)),
                resume: true,
                ..Default::default()
            },
        };
        let r = fs.replace_device(idx, dev, &opts, &|p| show(&pb, p));
        pb.finish_and_clear();
        let c = fs.close();
        let r = r?;
        c.map_err(|e| Fail::new(format!("closing the pool: {e}")))?;
        drop(lock);
        let s = r.rebuild.as_ref().or(r.verify.as_ref()).map(ScrubSummary::from);
        return report_replace(r.copied_bytes, s.as_ref(), a.json);
    }
    // The old device is gone: the new one takes its place resilvering,
    // then a scrub rebuilds it.
    let devs = hurricane::pool::open_paths(&paths, false)?;
    let size = devs.iter().filter(|d| !d.gone()).map(|d| d.size()).max();
    let size = size.ok_or_else(|| Fail::new("no device of the pool is there"))?;
    let (sb, _) = hurricane::pool::identify(devs)?;
    // Opened here only to be named and checked: the pool opens it again.
    let (dev, new) = match new_name.as_str() {
        n if hurricane::device::is_rados(n) => {
            let mut conns = hurricane::device::RadosConnections::default();
            let (dev, spec) = hurricane::device::rados_spec::new_device(n, &sb.pool_id, idx, size, &mut conns)?;
            (dev, PathBuf::from(spec.to_string()))
        }
        _ => (hurricane_fuse::control::open_new_device(&new, size)?, new.clone()),
    };
    if dev.size() < size {
        return Err(Fail::new(format!(
            "{}: {} bytes, smaller than the device it replaces ({size} bytes)",
            new.display(),
            dev.size()
        )));
    }
    drop(dev);
    hurricane::fs::prepare_offline_replacement(dir, idx, &new)?;
    let fs = Fs::open_dir(dir, Options::default())?;
    if let Some(c) = fs.report().double_claims.iter().find(|c| c.contains(&format!("device {idx} "))) {
        let _ = fs.close();
        return Err(Fail::new(format!("{}: too small for what device {idx} held ({c})", new.display())));
    }
    let s = resilver(&fs, dir, a.rate);
    let c = fs.close();
    let s = s?;
    c.map_err(|e| Fail::new(format!("closing the pool: {e}")))?;
    drop(lock);
    report_replace(0, Some(&s), a.json)
}

/// The scrub that finishes the resilver of the pool's resilvering devices.
fn resilver(fs: &Fs, dir: &Path, rate: Option<u64>) -> CliResult<ScrubSummary> {
    let pb = bytes_bar(0, "resilver");
    let opts = ScrubOptions {
        repair: true,
        rate,
        position_file: Some(dir.join(SCRUB_POSITION_FILE)),
        resume: true,
        resilver_only: true,
        ..Default::default()
    };
    let r = fs.scrub(&opts, &|p| {
        pb.set_length(p.total_bytes);
        pb.set_position(p.done_bytes);
    });
    pb.finish_and_clear();
    Ok(ScrubSummary::from(&r?))
}

fn show(pb: &ProgressBar, p: &ReplaceProgress) {
    match p {
        ReplaceProgress::Copy { done, total } => {
            pb.set_message("copy");
            pb.set_length(*total);
            pb.set_position(*done);
        }
        ReplaceProgress::Verify(p) => {
            pb.set_message("verify");
            pb.set_length(p.total_bytes);
            pb.set_position(p.done_bytes);
        }
        ReplaceProgress::Rebuild(p) => {
            pb.set_message("rebuild");
            pb.set_length(p.total_bytes);
            pb.set_position(p.done_bytes);
        }
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b || (a.canonicalize().ok().is_some() && a.canonicalize().ok() == b.canonicalize().ok())
}

/// OLD as an index, or as one of the pool's device paths.
fn device_index(paths: &[PathBuf], old: &str) -> CliResult<u32> {
    if let Ok(i) = old.parse::<u32>() {
        if (i as usize) < paths.len() {
            return Ok(i);
        }
        return Err(Fail::new(format!("device {i}: the pool has {} devices", paths.len())));
    }
    let want = std::path::absolute(old).unwrap_or_else(|_| PathBuf::from(old));
    paths
        .iter()
        .position(|p| same_file(p, &want) || p == Path::new(old))
        .map(|i| i as u32)
        .ok_or_else(|| Fail::new(format!("{old}: not a device of this pool")))
}

/// Asks the mount at `mnt` to run `req`, shows its progress, and returns
/// its final status.
pub fn online(mnt: &Path, req: &Request) -> CliResult<Status> {
    let read = || -> CliResult<Status> {
        let raw = hurricane_fuse::mountinfo::get_xattr(mnt, CONTROL_XATTR).map_err(|e| match e.raw_os_error() {
            Some(libc::ENODATA) | Some(libc::EOPNOTSUPP) => {
                Fail::new(format!("{}: not a pool directory nor the root of a Hurricane mount", mnt.display()))
            }
            _ => Fail::new(format!("{}: reading {CONTROL_XATTR}: {e}", mnt.display())),
        })?;
        Ok(Status::from_json(&raw)?)
    };
    let before = read()?;
    if before.state == JobState::Running {
        return Err(Fail::new(format!("{}: a {} is already running", mnt.display(), before.what)));
    }
    rustix::fs::setxattr(mnt, CONTROL_XATTR, &req.to_json(), rustix::fs::XattrFlags::empty()).map_err(|e| {
        Fail::new(match e {
            rustix::io::Errno::PERM => format!("{}: only root may start maintenance on a mount", mnt.display()),
            e => format!("{}: the mount refused the request ({e}; see its log)", mnt.display()),
        })
    })?;
    let what = match req {
        Request::Scrub { .. } => "scrub",
        Request::Replace { .. } => "replace",
        Request::Add { .. } => "add",
        Request::Remove { .. } => "evacuate",
        Request::Migrate { .. } => "migrate",
        Request::Clean { .. } => "clean",
        Request::Regroup { .. } => "regroup",
        Request::ClearErrors => "clear-errors",
    };
    let pb = if matches!(req, Request::Regroup { .. }) { files_bar(0, what) } else { bytes_bar(0, what) };
    let st = loop {
        let st = read()?;
        if st.job > before.job && st.state != JobState::Running {
            break st;
        }
        pb.set_message(st.phase.clone());
        pb.set_length(st.total_bytes);
        pb.set_position(st.done_bytes);
        // Short: the wait after the job ends counts in its time.
        std::thread::sleep(Duration::from_millis(20));
    };
    pb.finish_and_clear();
    if st.state == JobState::Failed {
        return Err(Fail::new(st.error.unwrap_or_else(|| "the job failed".into())));
    }
    Ok(st)
}

fn report_replace(copied: u64, rebuild: Option<&ScrubSummary>, json: bool) -> CliResult {
    if json {
        // A copy's check is its "verify"; a rebuild's scrub its "rebuild".
        let v = if copied > 0 {
            serde_json::json!({ "copied_bytes": copied, "verify": rebuild })
        } else {
            serde_json::json!({ "copied_bytes": copied, "rebuild": rebuild })
        };
        println!("{v}");
        return match rebuild {
            Some(s) => status_of(s),
            None => Ok(()),
        };
    }
    match rebuild {
        None => {
            println!("replaced: copied {} from the old device", human(copied));
            Ok(())
        }
        // A copy, then the check of what it copied.
        Some(s) if copied > 0 => {
            println!(
                "replaced: copied {} from the old device; verified, {} blocks rebuilt from redundancy",
                human(copied),
                s.repaired_blocks
            );
            report(s, false)
        }
        Some(s) => {
            println!("replaced: rebuilt from redundancy");
            report(s, false)
        }
    }
}

fn report(s: &ScrubSummary, json: bool) -> CliResult {
    if json {
        println!("{}", serde_json::to_string(s).unwrap_or_default());
        return status_of(s);
    }
    let lost: u64 = s.lost.iter().flat_map(|f| f.ranges.iter()).map(|r| r.1.div_ceil(4096)).sum();
    println!(
        "scrub{}: {} files, {} blocks verified ({} read), {} repaired, {} unrecoverable, {:.1} s, {}/s",
        if s.resumed { " (resumed)" } else { "" },
        s.files,
        s.checked_blocks,
        human(s.bytes_read),
        s.repaired_blocks,
        lost,
        s.duration_s,
        human(s.rate_bytes_per_s as u64)
    );
    if !s.rebuilt_devices.is_empty() && s.complete {
        println!("rebuilt devices: {:?} (online)", s.rebuilt_devices);
    }
    if s.meta_lost_blocks > 0 {
        println!(
            "unrecoverable: {} blocks of the meta-data (no copy holds them as written; run `hurricane fsck`)",
            s.meta_lost_blocks
        );
    }
    for f in &s.lost {
        let names = if f.paths.is_empty() { format!("<inode {} with no name>", f.ino) } else { f.paths.join(", ") };
        let ranges: Vec<String> = f.ranges.iter().map(|(o, l)| format!("{o}+{l}")).collect();
        println!("unrecoverable: {names} (bytes {})", ranges.join(", "));
    }
    status_of(s)
}

fn status_of(s: &ScrubSummary) -> CliResult {
    if s.meta_lost_blocks > 0 {
        return Err(Fail::code(EXIT_LOST, format!("{} meta-data blocks are unrecoverable", s.meta_lost_blocks)));
    }
    if !s.lost.is_empty() {
        return Err(Fail::code(EXIT_LOST, format!("{} files have unrecoverable data", s.lost.len())));
    }
    if !s.complete {
        return Err(Fail::new("the scrub was stopped before the end; run it again to continue"));
    }
    Ok(())
}
