//! The pool: its devices, their allocators and superblocks, how a pool
//! directory names its devices, and the identity checks made on open.

pub mod alloc;
pub mod published;
pub mod superblock;
mod table;

pub use alloc::Allocator;
pub use superblock::{Superblock, FORMAT_VERSION, MAX_COUNTER, MAX_DEVICES, OLDEST_READABLE, RESERVED_BLOCKS};
pub use table::Table;

use crate::device::{Device, DeviceHandle, DeviceState, FaultSpec, FileDevice, MissingDevice, BLOCK_SIZE};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The devices of an open pool and their allocators, indexed by device number.
/// Building blocks reach device space only through this.
pub struct Storage {
    pub devs: Table<DeviceHandle>,
    pub allocs: Table<Allocator>,
}

impl Storage {
    pub fn device_count(&self) -> u32 {
        self.devs.len() as u32
    }

    /// Makes every completed write on every writable device durable, in
    /// parallel. A device whose flush fails is marked Faulted (by its
    /// handle) and left out from then on; the call fails only when no
    /// device could be flushed at all.
    pub fn flush_all(&self) -> Result<()> {
        let live: Vec<&DeviceHandle> = self.devs.iter().filter(|d| d.state().writable()).collect();
        let results: Vec<Result<()>> = if live.len() == 1 {
            vec![live[0].flush()]
        } else {
            crate::helpers::scope(|s| {
                let hs: Vec<_> = live.iter().map(|d| s.spawn(move || d.flush())).collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err(Error::Device("flush thread failed".into()))))
                    .collect()
            })
        };
        // A device that faulted since its last flush may still hold writes
        // it acknowledged (a replica counts them as written): they are
        // flushed as far as it lets, not left volatile.
        for d in self.devs.iter().filter(|d| d.state() == crate::device::DeviceState::Faulted) {
            let _ = d.dev().flush();
        }
        let mut first_err = None;
        let mut ok = 0;
        for (d, r) in live.iter().zip(results) {
            match r {
                Ok(()) => ok += 1,
                Err(e) => {
                    tracing::warn!(device = d.index, "flush failed: {e}");
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) if ok == 0 => Err(e),
            _ if ok == 0 => Err(self.none_writable()),
            _ => Ok(()),
        }
    }

    /// Whether some device holds completed writes, not yet flushed, that
    /// the journal must order before its next record (see
    /// [`crate::device::verified_by_recovery`]).
    pub fn has_unflushed(&self) -> bool {
        self.devs.iter().any(|d| d.state().writable() && d.has_unflushed())
    }

    fn none_writable(&self) -> Error {
        let states: Vec<String> =
            self.devs.iter().map(|d| format!("{} ({}) is {}", d.index, d.name(), d.state())).collect();
        Error::Device(format!("none of the pool's devices takes writes: {}", states.join(", ")))
    }

    /// Writes the superblock to every writable device (slot `generation %
    /// 2`) and flushes each. A device that fails is marked Faulted and
    /// skipped; the call succeeds while at least one device holds the new
    /// superblock durably (opening takes the newest valid one).
    pub fn write_superblocks(&self, sb: &Superblock) -> Result<()> {
        let mut first_err = None;
        let mut written = Vec::new();
        for d in self.devs.iter().filter(|d| d.state().writable()) {
            let mut s = sb.clone();
            s.dev_index = d.index;
            s.dev_blocks = d.blocks();
            let b = s.encode()?;
            match d.write_blocks(sb.generation % 2, &b) {
                Ok(()) => written.push(d),
                Err(e) => {
                    tracing::warn!(device = d.index, "superblock write failed: {e}");
                    first_err.get_or_insert(e);
                }
            }
        }
        // Devices are independent: flush them in parallel.
        let flushed: Vec<Result<()>> = if written.len() <= 1 {
            written.iter().map(|d| d.flush()).collect()
        } else {
            crate::helpers::scope(|s| {
                let hs: Vec<_> = written.iter().map(|d| s.spawn(move || d.flush())).collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err(Error::Device("flush thread failed".into()))))
                    .collect()
            })
        };
        let mut durable = 0;
        for (d, r) in written.iter().zip(flushed) {
            match r {
                Ok(()) => durable += 1,
                Err(e) => {
                    tracing::warn!(device = d.index, "superblock flush failed: {e}");
                    first_err.get_or_insert(e);
                }
            }
        }
        if durable == 0 {
            return Err(first_err.unwrap_or_else(|| self.none_writable()));
        }
        Ok(())
    }

    /// Asks every device in use whether it went away (a deleted image
    /// file, a removed block device) and marks those Missing: a device no
    /// request has touched since is noticed too. Cheap (a file device
    /// checks at most every 100 ms); every commit calls it.
    pub fn probe(&self) {
        self.probe_with(|d| d.gone());
    }

    /// [`Storage::probe`], every device checked now (for reports).
    pub fn probe_now(&self) {
        self.probe_with(|d| d.gone_now());
    }

    fn probe_with(&self, gone: impl Fn(&dyn Device) -> bool) {
        for d in &self.devs {
            let st = d.state();
            if (st.readable() || st.writable()) && gone(&*d.dev()) {
                d.set_state(DeviceState::Missing);
            }
        }
    }

    /// Devices that are not online, with their state (for reports).
    pub fn degraded_devices(&self) -> Vec<(u32, String, DeviceState)> {
        self.devs.iter().filter(|d| d.state() != DeviceState::Online).map(|d| (d.index, d.name(), d.state())).collect()
    }
}

/// The file in a pool directory that lists its devices (`device = PATH`
/// lines) and the settings of its pool on this host.
pub const POOL_FILE: &str = "pool.conf";

/// The text of a pool directory's `pool.conf`, read without following a
/// link (the directory may be another user's: a link there would have
/// root read a file of its own, and name its lines in errors), and only
/// from a regular file.
pub fn read_pool_text(dir: &Path) -> std::io::Result<String> {
    use rustix::fs::{Mode, OFlags};
    use std::io::Read;
    let d = rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(&d, POOL_FILE, flags, Mode::empty()) {
        Err(rustix::io::Errno::LOOP) => {
            return Err(std::io::Error::other("a symbolic link: not followed (make it the file itself)"))
        }
        r => r?,
    };
    let mut f = std::fs::File::from(fd);
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    Ok(text)
}

/// Device paths of a pool directory. A `pool.conf` holding a line it
/// cannot hold is refused ([`check_text`]).
pub fn device_paths(dir: &Path) -> Result<Vec<PathBuf>> {
    let f = dir.join(POOL_FILE);
    let text = read_pool_text(dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::NotFound(format!("{} (not a Hurricane pool directory: no {POOL_FILE})", dir.display()))
        } else {
            Error::io(f.display().to_string(), e)
        }
    })?;
    check_text(&text, &f.display().to_string())?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Some(p) = device_of(line.trim()) else { continue };
        if crate::device::is_rados(p) {
            out.push(PathBuf::from(p));
            continue;
        }
        let p = PathBuf::from(p);
        out.push(if p.is_absolute() { p } else { dir.join(p) });
    }
    if out.is_empty() {
        return Err(Error::Device(format!("{}: lists no devices", f.display())));
    }
    Ok(out)
}

/// What a line of `pool.conf` is (docs/FORMAT.md, "Pool directory").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    Blank,
    /// `# ...`
    Comment,
    /// `device = PATH` (an image file or block device, a path relative to
    /// the directory or absolute) or `device = rados:...`.
    Device,
    /// `sim = MODEL`: the disk simulator (`mkfs --sim`).
    Sim,
    /// `fault = DEV SPEC`: faults to inject (tests).
    Fault,
    /// `numa = DEV NODE`: a device's NUMA node.
    Numa,
    /// `name =`, `id =`, `revision =`: a pool found by name in its Ceph
    /// cluster (`published`).
    Name,
    Id,
    Revision,
}

/// The `KEY = VALUE` lines, by key.
const KEYED: [(&str, Line); 7] = [
    ("device", Line::Device),
    ("sim", Line::Sim),
    ("fault", Line::Fault),
    ("numa", Line::Numa),
    ("name", Line::Name),
    ("id", Line::Id),
    ("revision", Line::Revision),
];

/// What the (trimmed) line `line` of `pool.conf` is; None for a line the
/// file cannot hold.
pub fn classify(line: &str) -> Option<Line> {
    if line.is_empty() {
        return Some(Line::Blank);
    }
    if line.starts_with('#') {
        return Some(Line::Comment);
    }
    KEYED.iter().find(|(k, _)| published::setting(line, k).is_some()).map(|(_, kind)| *kind)
}

/// Whether a (trimmed) line of `pool.conf` names a device (`device = PATH`).
pub fn is_device_line(line: &str) -> bool {
    classify(line) == Some(Line::Device)
}

/// The device a (trimmed) `device = PATH` line names; None for another line.
pub fn device_of(line: &str) -> Option<&str> {
    published::setting(line, "device")
}

/// Refuses a `pool.conf` text (`what` names the file) holding a line the
/// file cannot hold, naming the line and its number: each line is blank,
/// a `#` comment, or a `KEY = VALUE` line of a key [`classify`] knows,
/// `device =` naming a device. A pool directory is often its user's, who
/// may write anything there: nothing else is taken (or written) as part
/// of a pool's description.
pub fn check_text(text: &str, what: &str) -> Result<()> {
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        let bad = |why: &str| {
            // The line as written, cut short if long.
            let mut shown: String = line.chars().take(100).collect();
            if shown.len() < line.len() {
                shown.push_str("...");
            }
            Error::Invalid(format!("{what} line {}: {shown:?} {why}", n + 1))
        };
        match classify(line) {
            None => {
                return Err(bad(
                    "is not a pool.conf line (pool.conf holds blank lines, # comments, and device =, sim =, \
                     fault =, numa =, name =, id = and revision = lines; a device is listed as `device = PATH`)",
                ))
            }
            Some(Line::Device) if device_of(line).is_some_and(str::is_empty) => {
                return Err(bad("names no device (`device = PATH`)"))
            }
            _ if line.contains('\0') => return Err(bad("holds a NUL byte")),
            _ => {}
        }
    }
    Ok(())
}

/// The value of a `numa = DEV NODE` line.
fn numa_line(line: &str) -> Option<&str> {
    published::setting(line, "numa")
}

/// The NUMA nodes a pool directory gives its devices (`numa = DEV NODE`
/// lines in pool.conf), for `replicate(read=nearest)`: they override what
/// sysfs says of the device (nothing, for an image file on a file system
/// whose disk sysfs places on no node).
pub fn numa_nodes(dir: &Path) -> Result<Vec<(u32, u32)>> {
    let f = dir.join(POOL_FILE);
    let text = read_pool_text(dir).map_err(|e| Error::io(f.display().to_string(), e))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().map(str::trim).enumerate() {
        let Some(v) = numa_line(line) else { continue };
        let bad = |m: String| Error::Invalid(format!("{} line {}: {m}", f.display(), n + 1));
        let (dev, node) = v.split_once(char::is_whitespace).ok_or_else(|| bad("expected `numa = DEV NODE`".into()))?;
        let dev: u32 = dev.parse().map_err(|_| bad(format!("numa: `{dev}` is not a device number")))?;
        let node: u32 =
            node.trim().parse().map_err(|_| bad(format!("numa: `{}` is not a node number", node.trim())))?;
        out.push((dev, node));
    }
    Ok(out)
}

/// Replaces `pool.conf` with `text` (a changed device list): written as
/// [`write_pool_text`] does, and for a pool found by name in its cluster,
/// with its revision raised and published there (`published`; a failed
/// publication is logged and made again at the next open).
pub fn replace_pool_file(dir: &Path, text: &str) -> Result<()> {
    let text = published::next_revision(text)?;
    write_pool_text(dir, &text)?;
    // The change is made (the devices and this directory have it): a
    // cluster that cannot take the new description now gets it when the
    // pool is next opened here (`published::sync`).
    if let Err(e) = published::publish(&text, false) {
        tracing::warn!("{}: the pool's description in its cluster is not updated yet: {e}", dir.display());
    }
    Ok(())
}

/// Replaces `pool.conf` with `text`: a temporary file (`pool.conf.tmp`,
/// one left there before removed first), synced, renamed over it, and the
/// directory synced, so a crash leaves the old list or the new. Both names
/// are opened relative to the directory, never through a link
/// ([`crate::dirfile`]). A text holding a line pool.conf cannot hold is
/// refused ([`check_text`]).
pub fn write_pool_text(dir: &Path, text: &str) -> Result<()> {
    check_text(text, &dir.join(POOL_FILE).display().to_string())?;
    crate::dirfile::Dir::open(dir)?.replace(POOL_FILE, format!("{POOL_FILE}.tmp"), text.as_bytes())
}

/// The value of a `sim = SPEC` line.
fn sim_line(line: &str) -> Option<&str> {
    published::setting(line, "sim")
}

/// The value of a `fault = DEV SPEC` line.
fn fault_line(line: &str) -> Option<&str> {
    published::setting(line, "fault")
}

/// The faults a pool directory asks to inject (`fault = DEV SPEC` lines in
/// pool.conf, SPEC as [`FaultSpec::parse`] reads it): `Fs::open_dir` wraps
/// device DEV in a [`crate::device::FaultDevice`] with it. For tests.
pub fn fault_specs(dir: &Path) -> Result<Vec<(u32, FaultSpec)>> {
    let f = dir.join(POOL_FILE);
    let text = read_pool_text(dir).map_err(|e| Error::io(f.display().to_string(), e))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().map(str::trim).enumerate() {
        let Some(v) = fault_line(line) else { continue };
        let bad = |m: String| Error::Invalid(format!("{} line {}: {m}", f.display(), n + 1));
        let (dev, spec) = v.split_once(char::is_whitespace).ok_or_else(|| bad("expected `fault = DEV SPEC`".into()))?;
        let dev: u32 = dev.parse().map_err(|_| bad(format!("fault: `{dev}` is not a device number")))?;
        out.push((dev, FaultSpec::parse(spec).map_err(bad)?));
    }
    Ok(out)
}

/// The disk simulator a pool directory asks for (`sim = hdd...` in
/// pool.conf, written by `mkfs --sim`): `Fs::open_dir` wraps every device
/// in a [`crate::device::SimDevice`] with it.
pub fn sim_params(dir: &Path) -> Result<Option<crate::device::SimParams>> {
    let f = dir.join(POOL_FILE);
    let text = read_pool_text(dir).map_err(|e| Error::io(f.display().to_string(), e))?;
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
    let text = read_pool_text(dir).map_err(|e| Error::io(f.display().to_string(), e))?;
    const NOTE: &str = "# timing of a simulated disk on every device (see device::sim)";
    let mut out: String =
        text.lines().filter(|l| sim_line(l.trim()).is_none() && l.trim() != NOTE).map(|l| format!("{l}\n")).collect();
    if let Some(p) = p {
        out.push_str(&format!("{NOTE}\nsim = {p}\n"));
    }
    replace_pool_file(dir, &out)
}

/// Writes a new pool directory's device list. `named`: the pool's name and
/// id, for a pool with devices in a Ceph cluster, whose description is
/// then published there under that name (`published`; refused if the name
/// is taken).
pub fn write_pool_file(dir: &Path, paths: &[PathBuf], named: Option<(&str, &[u8; 16])>) -> Result<()> {
    let mut s = String::from("# Hurricane pool: one device a line, in device order\n");
    for p in paths {
        let rel = p.strip_prefix(dir).unwrap_or(p);
        s.push_str(&format!("device = {}\n", rel.display()));
    }
    if let Some((name, id)) = named {
        s.push_str(&published::naming_lines(name, id));
    }
    write_pool_text(dir, &s)?;
    published::publish(&s, true)
}

/// Opens the named device files (and rados devices, `rados:...`). One that does not exist or cannot be
/// opened is logged and stands as a [`MissingDevice`] placeholder, so the
/// pool can open degraded (`identify` gives it its slot).
pub fn open_paths(paths: &[PathBuf], writable: bool) -> Result<Vec<Arc<dyn Device>>> {
    open_paths_with(paths, writable, &mut crate::device::RadosConnections::default())
}

/// [`open_paths`], rados devices opened through the connections `rados`
/// (those the pool's lease was taken on).
pub fn open_paths_with(
    paths: &[PathBuf],
    writable: bool,
    rados: &mut crate::device::RadosConnections,
) -> Result<Vec<Arc<dyn Device>>> {
    Ok(paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let name = p.display().to_string();
            // A device in a Ceph cluster (`rados:...`): one that cannot be
            // reached is missing, as an image file that cannot be opened.
            if crate::device::is_rados(&name) {
                let opened = crate::device::RadosSpec::parse(&name).and_then(|s| rados.open_device(&s));
                return opened.unwrap_or_else(|e| {
                    tracing::warn!("device {i} ({name}) cannot be opened, taken as missing: {e}");
                    Arc::new(MissingDevice::new(name, 0))
                });
            }
            if !p.exists() {
                tracing::debug!("device {i} ({name}) is missing");
                return Arc::new(MissingDevice::new(name, 0)) as Arc<dyn Device>;
            }
            match FileDevice::open(p, writable) {
                Ok(d) => Arc::new(d) as Arc<dyn Device>,
                Err(e) => {
                    tracing::warn!("device {i} ({name}) cannot be opened, taken as missing: {e}");
                    Arc::new(MissingDevice::new(name, 0))
                }
            }
        })
        .collect())
}

/// Opens the one device `path` names (an image file, a block device, or
/// `rados:...`), failing when it cannot (where [`open_paths`] would take it
/// as missing).
pub fn open_device(path: &Path, writable: bool) -> Result<Arc<dyn Device>> {
    match path.to_str().filter(|n| crate::device::is_rados(n)) {
        Some(name) => crate::device::RadosConnections::default().open_device(&crate::device::RadosSpec::parse(name)?),
        None => Ok(Arc::new(FileDevice::open(path, writable)?)),
    }
}

/// Reads and cross-checks the superblocks of `devs`; returns the newest
/// valid superblock and the devices ordered by their index. Refuses
/// duplicated and newer-format devices, naming them. Devices of the pool
/// that are not among `devs`, or that are gone (a [`MissingDevice`]
/// placeholder, whose position in `devs` names the slot it stands for),
/// get a placeholder handle in state Missing: the pool opens degraded as
/// long as one device has a valid superblock, and what needs the missing
/// ones fails naming them. A device whose superblocks fail to read (I/O
/// errors), are damaged in both slots or are not a Hurricane device's, or
/// that belongs to another pool while most devices agree on this one,
/// takes the slot of its position in `devs` as Faulted, when that slot is
/// otherwise empty; else it is refused, naming it.
pub fn identify(devs: Vec<Arc<dyn Device>>) -> Result<(Superblock, Vec<DeviceHandle>)> {
    let mut found: Vec<(Superblock, Arc<dyn Device>)> = Vec::new();
    // Position in `devs` and name of every device that is gone.
    let mut gone: Vec<(usize, String)> = Vec::new();
    // Devices whose superblocks cannot be read (I/O errors): position,
    // device, error.
    let mut unreadable: Vec<(usize, Arc<dyn Device>, Error)> = Vec::new();
    // Position in `devs` of each device with a valid superblock.
    let mut positions: Vec<(usize, Arc<dyn Device>)> = Vec::new();
    for (pos, dev) in devs.into_iter().enumerate() {
        if dev.gone() {
            gone.push((pos, dev.name().to_string()));
            continue;
        }
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
        let mut lost = false;
        let mut failed = None;
        for slot in 0..RESERVED_BLOCKS {
            if let Err(e) = dev.read_at(&mut buf, slot * BLOCK_SIZE as u64) {
                if dev.gone() {
                    lost = true;
                    break;
                }
                failed = Some(e);
                break;
            }
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
        if lost {
            gone.push((pos, dev.name().to_string()));
            continue;
        }
        if let Some(e) = failed {
            unreadable.push((pos, dev, e));
            continue;
        }
        // A device whose superblocks are garbage (overwritten, damaged in
        // both slots) is taken as faulted in its slot, like one that fails
        // to read: the pool opens degraded without it, and it is replaced.
        let sb = match best {
            Some(sb) => sb,
            None if errs.is_empty() => {
                let e = Error::Device(format!("{}: not a Hurricane device (no superblock)", dev.name()));
                unreadable.push((pos, dev, e));
                continue;
            }
            None => {
                let e = Error::Device(format!("{}: no valid superblock ({})", dev.name(), errs.join("; ")));
                unreadable.push((pos, dev, e));
                continue;
            }
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
        positions.push((pos, dev.clone()));
        found.push((sb, dev));
    }
    // A device of another pool among them (one overwritten with another
    // pool's device) is faulted in its slot too, when most of the devices
    // agree on the pool; with no majority, the open is refused below.
    let mut ids: Vec<([u8; 16], usize)> = Vec::new();
    for (sb, _) in &found {
        match ids.iter_mut().find(|(id, _)| *id == sb.pool_id) {
            Some((_, n)) => *n += 1,
            None => ids.push((sb.pool_id, 1)),
        }
    }
    ids.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    if let [(id, a), (_, b), ..] = ids.as_slice() {
        if a > b {
            let id = *id;
            let (ours, theirs): (Vec<_>, Vec<_>) = found.into_iter().partition(|(sb, _)| sb.pool_id == id);
            found = ours;
            for (_, dev) in theirs {
                let pos = positions.iter().find(|(_, d)| Arc::ptr_eq(d, &dev)).map_or(usize::MAX, |(p, _)| *p);
                let e = Error::Device(format!("{}: belongs to another pool", dev.name()));
                unreadable.push((pos, dev, e));
            }
        }
    }
    let Some(first) = found.first().map(|f| f.0.clone()) else {
        if let Some((_, _, e)) = unreadable.into_iter().next() {
            return Err(e);
        }
        if gone.is_empty() {
            return Err(Error::Device("no devices given".into()));
        }
        let names: Vec<String> = gone.iter().map(|(_, n)| n.clone()).collect();
        return Err(Error::Device(format!("none of the pool's devices is there: {} missing", names.join(", "))));
    };
    // The newest superblock decides the pool's shape. A device whose own
    // superblock is older may say the pool has fewer devices: a device was
    // added, and the add's superblock writes did not reach it before a
    // crash (the new device's superblock, written first, is the newest).
    let mut best = first;
    for (sb, _) in &found {
        if sb.generation > best.generation {
            best = sb.clone();
        }
    }
    let count = best.dev_count;
    // Indexed by device number; sized by the devices given, never by the
    // count a superblock claims.
    let mut slots: std::collections::BTreeMap<u32, (Superblock, Arc<dyn Device>)> = Default::default();
    for (sb, dev) in found {
        if sb.pool_id != best.pool_id {
            return Err(Error::Device(format!("{}: belongs to another pool", dev.name())));
        }
        if sb.dev_count != count && sb.generation >= best.generation {
            return Err(Error::Device(format!(
                "{}: says the pool has {} devices, another says {count}",
                dev.name(),
                sb.dev_count
            )));
        }
        let i = sb.dev_index;
        if i >= count {
            return Err(Error::Device(format!(
                "{}: says it is device {i}, but the pool has {count} devices (an add that did not complete? \
                 take it out of the pool's device list)",
                dev.name()
            )));
        }
        if let Some((_, other)) = slots.get(&i) {
            return Err(Error::Device(format!("{} and {} are both device {i} of the pool", other.name(), dev.name())));
        }
        slots.insert(i, (sb, dev));
    }
    // A missing device's size is not recorded anywhere else: the largest
    // present device stands for it (what `df` shows; nothing is allocated
    // on a missing device).
    let guess = slots.values().map(|(sb, _)| sb.dev_blocks).max().unwrap_or(RESERVED_BLOCKS);
    // `count` is at most MAX_DEVICES (decode), so this loop is bounded.
    let mut handles = Vec::with_capacity(count as usize);
    for i in 0..count {
        // A device listed in this slot's place whose superblocks fail to
        // read, are garbage or another pool's: it stays in the slot,
        // faulted (nothing is read from or written to it until it is
        // brought back or replaced).
        let failing = unreadable.iter().position(|(pos, _, _)| *pos == i as usize && !slots.contains_key(&i));
        if let Some(k) = failing {
            let (_, dev, e) = unreadable.swap_remove(k);
            tracing::warn!("device {i} ({}) taken as faulted: {e}", dev.name());
            handles.push(DeviceHandle::with_state(i, dev, DeviceState::Faulted));
            continue;
        }
        match slots.remove(&i) {
            Some((_, dev)) => handles.push(DeviceHandle::new(i, dev)),
            None => {
                let name = gone
                    .iter()
                    .find(|(pos, _)| *pos == i as usize)
                    .map(|(_, n)| n.clone())
                    .unwrap_or_else(|| "not found".into());
                let removed = best.dev_states.contains(&(i, DeviceState::Removed as u8));
                if !removed {
                    tracing::warn!("device {i} ({name}) of {count} is missing: the pool opens degraded");
                }
                let dev = Arc::new(MissingDevice::new(name, guess.saturating_mul(BLOCK_SIZE as u64)));
                handles.push(DeviceHandle::with_state(i, dev, DeviceState::Missing));
            }
        }
    }
    // A device that fails to read and stands for no missing slot is refused.
    if let Some((_, _, e)) = unreadable.into_iter().next() {
        return Err(e);
    }
    // A device removed from the pool stays so (a resilvering one is set
    // by the open, after replay: the journal may be on it).
    for &(i, st) in &best.dev_states {
        if let (Some(h), Some(s @ (DeviceState::Removed | DeviceState::Evacuating))) =
            (handles.get(i as usize), DeviceState::from_persistent(st))
        {
            // A removed device that is still there stays out of use; an
            // evacuating one serves what it holds only if it is there.
            if s == DeviceState::Removed || h.state() == DeviceState::Online {
                h.restore_state(s);
            }
        }
    }
    check_journal(&best, &handles)?;
    Ok((best, handles))
}

/// The journal regions (copy and mirror) of the chosen superblock against
/// the real size of the devices they name; at least one copy must be on a
/// readable device.
fn check_journal(sb: &Superblock, handles: &[DeviceHandle]) -> Result<()> {
    let mut readable = 0;
    for j in &sb.journals() {
        let dev = handles.get(j.dev as usize).ok_or_else(|| {
            Error::corrupt("superblock", format!("journal on device {} of a pool of {}", j.dev, handles.len()))
        })?;
        if !dev.state().readable() {
            continue;
        }
        readable += 1;
        let blocks = dev.blocks();
        if j.start.checked_add(j.blocks).is_none_or(|end| end > blocks) {
            return Err(Error::corrupt(
                format!("superblock of {}", dev.name()),
                format!("journal region {}+{} blocks ends past the device's {blocks} blocks", j.start, j.blocks),
            ));
        }
    }
    if readable == 0 {
        let name = |d: u32| handles.get(d as usize).map(|h| h.name()).unwrap_or_default();
        let each: Vec<String> = sb
            .journals()
            .iter()
            .map(|j| format!("device {} ({}) is {}", j.dev, name(j.dev), handles[j.dev as usize].state()))
            .collect();
        return Err(Error::Device(format!(
            "no copy of the journal can be read ({}): the pool cannot open",
            each.join("; ")
        )));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of line pool.conf holds: as mkfs, `device add` and
    /// `replace`, `mkfs --sim` and a pool named in its cluster write them,
    /// and the `numa =` and `fault =` lines docs/FORMAT.md describes.
    const EVERY_KIND: &str = "# Hurricane pool: one device a line, in device order
device = dev0.img
device=/abs/dev1.img
  device = rados:hfs/hurricane.ab.2?conf=/etc/ceph/ceph.conf&size=67108864

# timing of a simulated disk on every device (see device::sim)
sim = hdd
fault = 1 read-error=2-16383
numa = 0 1
# found from other hosts as rados:CEPHPOOL/web?conf=PATH
name = web
id = 0123456789abcdef0123456789abcdef
revision = 3
";

    #[test]
    fn every_kind_of_line_is_known() {
        use Line::*;
        let kinds: Vec<Line> = EVERY_KIND.lines().map(|l| classify(l.trim()).unwrap()).collect();
        assert_eq!(
            kinds,
            [Comment, Device, Device, Device, Blank, Comment, Sim, Fault, Numa, Comment, Name, Id, Revision]
        );
        check_text(EVERY_KIND, "pool.conf").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(POOL_FILE), EVERY_KIND).unwrap();
        let devs = device_paths(dir.path()).unwrap();
        assert_eq!(devs[0], dir.path().join("dev0.img"));
        assert_eq!(devs[1], PathBuf::from("/abs/dev1.img"));
        assert!(devs[2].to_str().unwrap().starts_with("rados:hfs/"));
        assert_eq!(devs.len(), 3);
    }

    #[test]
    fn an_unknown_line_is_refused_naming_it() {
        for (bad, why) in [
            ("* * * * * root /tmp/x", "is not a pool.conf line"),
            ("dev0.img", "`device = PATH`"),
            ("/dev/sdb", "`device = PATH`"),
            ("device dev0.img", "is not a pool.conf line"),
            ("devices = 3", "is not a pool.conf line"),
            ("[global]", "is not a pool.conf line"),
            ("sim hdd", "is not a pool.conf line"),
            ("device =", "names no device"),
            ("device = a\0b", "NUL"),
        ] {
            let text = format!("device = dev0.img\n{bad}\nnuma = 0 1\n");
            let e = check_text(&text, "/p/pool.conf").unwrap_err().to_string();
            let shown = format!("{:?}", bad.trim());
            assert!(e.contains("/p/pool.conf line 2: ") && e.contains(&shown) && e.contains(why), "{bad}: {e}");
        }
        // A long line is cut short in the message.
        let e = check_text(&"x".repeat(5000), "pool.conf").unwrap_err().to_string();
        assert!(e.len() < 500 && e.contains("line 1"), "{e}");
        // Opening refuses it; nothing writes it.
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join(POOL_FILE);
        std::fs::write(&f, "device = dev0.img\nrm -rf /\n").unwrap();
        let e = device_paths(dir.path()).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("rm -rf /"), "{e}");
        let e = write_pool_text(dir.path(), "device = a\nhello\n").unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("hello"), "{e}");
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "device = dev0.img\nrm -rf /\n");
        assert!(!dir.path().join("pool.conf.tmp").exists());
    }

    /// The pool directory may be another user's: `pool.conf.tmp` or
    /// `pool.conf` links she left there are replaced, never written
    /// through.
    #[test]
    fn the_list_is_written_through_no_planted_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "root's\n").unwrap();
        let pool = dir.path().join("pool");
        std::fs::create_dir(&pool).unwrap();
        std::os::unix::fs::symlink(&victim, pool.join("pool.conf.tmp")).unwrap();
        write_pool_file(&pool, &[pool.join("dev0.img")], None).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"root's\n");
        assert_eq!(device_paths(&pool).unwrap(), [pool.join("dev0.img")]);
        assert!(std::fs::symlink_metadata(pool.join("pool.conf.tmp")).is_err());
        std::fs::remove_file(pool.join(POOL_FILE)).unwrap();
        std::os::unix::fs::symlink(&victim, pool.join(POOL_FILE)).unwrap();
        replace_pool_file(&pool, "device = dev1.img\n").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"root's\n");
        assert!(std::fs::symlink_metadata(pool.join(POOL_FILE)).unwrap().is_file());
        assert_eq!(device_paths(&pool).unwrap(), [pool.join("dev1.img")]);
        // Nor read through: a link there is refused, naming the file.
        std::fs::rename(pool.join(POOL_FILE), dir.path().join("copy")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("copy"), pool.join(POOL_FILE)).unwrap();
        let e = device_paths(&pool).unwrap_err().to_string();
        assert!(e.contains("symbolic link") && e.contains("pool.conf"), "{e}");
    }
}
