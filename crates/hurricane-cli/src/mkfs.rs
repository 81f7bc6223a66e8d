//! `hurricane mkfs`: make a pool of image files or given devices.

use crate::util::{human, parse_size, spinner, CliResult, Fail};
use clap::Args;
use hurricane::{layout, pool, FormatOptions, Fs};
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct MkfsArgs {
    /// Pool directory (created if missing); it records the pool's devices.
    /// Or, for a pool with devices in a Ceph cluster,
    /// `rados:CEPHPOOL/NAME?conf=PATH`: the pool NAME, found by that name
    /// from any host.
    pub pool: PathBuf,
    /// Number of image files (dev0.img, dev1.img, ...) to make in POOL_DIR,
    /// as new files: one already there is refused unless --force is given.
    #[arg(short = 'n', long, conflicts_with = "device")]
    pub devices: Option<u32>,
    /// Size of each device (K, M, G, T suffixes); with --device, missing
    /// files are created at this size.
    #[arg(short = 's', long, value_parser = parse_size)]
    pub device_size: Option<u64>,
    /// A file or block device to use (repeat for each device, in order),
    /// or a device in a Ceph cluster, `rados:POOL[/PREFIX]?conf=PATH[&size=SIZE]`
    /// (in builds with the `rados` feature).
    #[arg(short = 'd', long = "device", value_name = "PATH")]
    pub device: Vec<PathBuf>,
    /// Pool default layout for new files (default: stripe over every device).
    #[arg(short = 'l', long, value_name = "SPEC", value_parser = crate::util::spec_arg)]
    pub layout: Option<String>,
    /// Journal size (default: 1/32 of device 0, between 4 MiB and 256 MiB).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub journal_size: Option<u64>,
    /// Layout of the meta-file, kept as given (default: a copy on each of
    /// the first three devices, more where the default layout survives
    /// more failures, placed anew when a device fails).
    #[arg(long, value_name = "SPEC")]
    pub meta_layout: Option<String>,
    /// Simulate a disk's timing on every device when the pool is opened
    /// (`hdd`, or `hdd:rpm=5400,seek_full_ms=20,...`; `none` for real timing).
    #[arg(long, value_name = "MODEL")]
    pub sim: Option<String>,
    /// Checksum every block of new files and verify it on every read (`on`,
    /// the default), or not (`off`).
    #[arg(long, value_name = "on|off", default_value = "on", value_parser = parse_on_off, action = clap::ArgAction::Set)]
    pub checksum: bool,
    /// The pool's name in its Ceph cluster, for a pool with devices there
    /// (default: POOL_DIR's name): other hosts open it as
    /// `rados:CEPHPOOL/NAME?conf=PATH`.
    #[arg(long)]
    pub name: Option<String>,
    /// Overwrite a pool that POOL_DIR already holds (with --devices, what
    /// is at the image files' names is removed and the images made anew).
    #[arg(short = 'f', long)]
    pub force: bool,
}

pub fn run(a: &MkfsArgs) -> CliResult {
    match a.pool.to_str().filter(|p| hurricane::device::is_rados(p)) {
        Some(locator) => run_named(a, locator),
        None => run_in(a, &a.pool, a.name.clone(), a.force),
    }
}

/// `mkfs rados:CEPHPOOL/NAME?conf=PATH --device rados:...`: the pool
/// directory is this host's one for NAME; the name must be free in the
/// cluster (the directory may hold an older pool's description).
fn run_named(a: &MkfsArgs, locator: &str) -> CliResult {
    let loc = pool::published::Locator::parse(locator)?;
    if a.name.as_ref().is_some_and(|n| *n != loc.name) {
        return Err(Fail::code(
            2,
            format!("--name {} and the pool's name {} differ", a.name.as_deref().unwrap_or(""), loc.name),
        ));
    }
    let home = a.device.iter().filter_map(|d| d.to_str()).find(|d| hurricane::device::is_rados(d));
    let home = home.map(hurricane::device::RadosSpec::parse).transpose()?;
    if home.as_ref().is_none_or(|h| h.pool != loc.pool) {
        return Err(Fail::code(
            2,
            format!(
                "{locator}: the pool's first device must be in RADOS pool {} (--device rados:{}?conf=...)",
                loc.pool, loc.pool
            ),
        ));
    }
    let dir = loc.dir(&pool::published::local_root());
    run_in(a, &dir, Some(loc.name), true)
}

fn run_in(a: &MkfsArgs, dir: &Path, name: Option<String>, force: bool) -> CliResult {
    let conf = dir.join(pool::POOL_FILE);
    if conf.exists() && !force {
        return Err(Fail::new(format!(
            "{}: already holds a pool ({}); use --force to overwrite it",
            dir.display(),
            pool::POOL_FILE
        )));
    }
    // Specs are checked before anything is written.
    for spec in [&a.layout, &a.meta_layout].into_iter().flatten() {
        layout::parse(spec)?;
    }
    if dir.exists() {
        if a.devices.is_some() {
            refuse_foreign_images(dir)?;
        }
        crate::util::warn_if_foreign(dir);
    }
    let sim = match &a.sim {
        Some(spec) => hurricane::device::SimParams::parse(spec)?,
        None => None,
    };
    let opts = FormatOptions {
        journal_size: a.journal_size,
        default_layout: a.layout.clone(),
        meta_layout: a.meta_layout.clone(),
        checksum: a.checksum,
        name,
    };
    let pb = spinner("formatting");
    let made: Vec<PathBuf> = match (a.devices, a.device.is_empty()) {
        (Some(n), true) => {
            let size = a.device_size.ok_or_else(|| Fail::code(2, "--devices needs --device-size"))?;
            if n == 0 {
                return Err(Fail::code(2, "--devices must be at least 1"));
            }
            if dir.exists() {
                clear_image_names(dir, n, force)?;
            }
            // It makes every image new, and removes them again on an error.
            Fs::mkfs_dir(dir, n, size, &opts)?
        }
        (None, false) => {
            let fresh: Vec<PathBuf> = a.device.iter().filter(|p| !p.exists()).cloned().collect();
            if let Err(e) = Fs::mkfs_devices(dir, &a.device, a.device_size, &opts) {
                for p in fresh {
                    let _ = std::fs::remove_file(p);
                }
                return Err(e.into());
            }
            pool::device_paths(dir)?
        }
        _ => return Err(Fail::code(2, "give --devices N --device-size SIZE, or --device PATH (repeated)")),
    };
    pb.finish_and_clear();
    if a.sim.is_some() {
        pool::set_sim(dir, sim.as_ref())?;
    }
    println!("{}", summary(dir, &made)?);
    if let Some(loc) = pool::published::locator_of(dir)? {
        println!("Other hosts open it as {loc} (their own config path in place of this one).");
    }
    if let Some(p) = &sim {
        println!("Every device is timed as a simulated disk: {p}.");
    }
    Ok(())
}

/// Root makes no image files (`--devices N`) in a directory another user
/// controls: their names are hers (she may plant links there, or swap the
/// images afterwards). The images are made new relative to the
/// directory's descriptor, never through a link (`Fs::mkfs_dir`), so a
/// planted link fails the mkfs rather than redirecting it, and pool.conf
/// is written there safely, as `hurricane::dirfile` says; this refusal
/// comes first and names the directory. A pool made in a directory of
/// root's can be handed over afterwards.
fn refuse_foreign_images(dir: &Path) -> CliResult {
    if !rustix::process::geteuid().is_root() {
        return Ok(());
    }
    let st = rustix::fs::stat(dir).map_err(|e| Fail::new(format!("{}: {e}", dir.display())))?;
    match hurricane::dirfile::foreign_dir(&st, 0) {
        Some(why) => Err(Fail::new(format!(
            "{}: {why}: root makes no image files in a directory another user controls (their names \
             could be links to files of root's); make the pool in a directory of root's, then hand it over",
            dir.display()
        ))),
        None => Ok(()),
    }
}

/// `--devices N` makes its images (`dev0.img`...) new, never writing
/// through what has their names: with `--force` that is removed first (a
/// link, not what it leads to; a directory is an error), without it the
/// pool is refused, naming it.
fn clear_image_names(dir: &Path, n: u32, force: bool) -> CliResult {
    let d = hurricane::dirfile::Dir::open(dir)?;
    for i in 0..n {
        let name = format!("dev{i}.img");
        if d.lstat(&name)?.is_none() {
            continue;
        }
        if force {
            d.remove(&name)?;
        } else {
            return Err(Fail::new(format!(
                "{}: already exists; mkfs overwrites no image file (use --force to replace it)",
                dir.join(&name).display()
            )));
        }
    }
    Ok(())
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: expected on or off")),
    }
}

/// One paragraph on what was made, read back from the new superblocks.
fn summary(dir: &Path, paths: &[PathBuf]) -> CliResult<String> {
    let devs = pool::open_paths(paths, false)?;
    let sizes: Vec<u64> = devs.iter().map(|d| d.size()).collect();
    let (sb, _) = pool::identify(devs)?;
    let n = paths.len();
    let names: Vec<String> = paths.iter().map(|p| p.strip_prefix(dir).unwrap_or(p).display().to_string()).collect();
    let total: u64 = sizes.iter().sum();
    let first = sizes.first().copied().unwrap_or(0);
    let size_text = if sizes.iter().all(|s| *s == first) {
        format!("{} each, {} in all", human(first), human(total))
    } else {
        format!("{} in all ({})", human(total), sizes.iter().map(|s| human(*s)).collect::<Vec<_>>().join(", "))
    };
    let default = layout::parse(&sb.default_layout)
        .map(|s| layout::canonical(s).to_string())
        .unwrap_or(sb.default_layout.clone());
    let meta =
        hurricane::blocks::Layout::decode(&mut hurricane::codec::Decoder::new(&sb.meta_layout, "meta-file layout"))
            .map(|l| l.spec().to_string())
            .unwrap_or_else(|e| format!("unreadable ({e})"));
    Ok(format!(
        "Made a Hurricane pool in {}: {n} device{} ({}), {size_text}. The journal takes {} on {} {}; the meta-data is stored as {meta}. \
         New files get the layout {default} unless a directory or the file says otherwise{sums}. \
         Use it with `hurricane put {} LOCAL PATH`, or mount it with `hurricane mount {} MOUNTPOINT`.",
        dir.display(),
        if n == 1 { "" } else { "s" },
        names.join(", "),
        human(sb.journal.blocks * 4096),
        if sb.journals().len() == 1 { "device" } else { "each of devices" },
        sb.journals().iter().map(|j| j.dev.to_string()).collect::<Vec<_>>().join(", "),
        dir.display(),
        dir.display(),
        sums = if sb.checksum { ", with a checksum of every block verified on every read" } else { "" },
    ))
}
