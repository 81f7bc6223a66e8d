//! A pool with devices in a Ceph cluster is found by its name from any
//! host: its directory's `pool.conf` is also kept in the cluster, as the
//! object `hurricane.pool.NAME` in the RADOS pool of its first rados device
//! (the *home* device), so `rados:CEPHPOOL/NAME?conf=PATH` is all another
//! host needs (docs/FORMAT.md, "A pool's description in its cluster").
//!
//! - **What is shared**: the device lines, `sim =`, and the `name =`, `id =`
//!   and `revision =` lines. What stays on each host: `numa =` and `fault =`
//!   lines and comments.
//! - **Revisions**: every change of the device list (mkfs, `device add`,
//!   `device replace`) goes through [`super::replace_pool_file`], which
//!   raises the revision and publishes. Those changes are made only by the
//!   pool's one writer (the lease of `device::rados`), so revisions do not
//!   fork. Opening a named pool directory ([`sync`]) compares revisions:
//!   the cluster's newer, the directory takes it (another host added a
//!   device); the directory's newer (its publication failed), it is
//!   published again.
//! - **Config paths**: the description holds its publisher's path to the
//!   cluster's config. A host that reads it puts its own path in every
//!   device line that named the same config as the home device, so each
//!   host reaches the cluster through its own config file.
//! - **One name, one pool**: mkfs refuses a name already taken in the RADOS
//!   pool (an exclusive create), and a directory whose pool id differs from
//!   the cluster's description of its name neither takes it nor overwrites
//!   it.

use super::{is_device_line, POOL_FILE};
use crate::device::{is_rados, RadosConnections, RadosSpec};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// What names the object holding a pool's description: `hurricane.pool.NAME`.
pub const OBJECT_PREFIX: &str = "hurricane.pool.";

/// The longest pool name.
pub const MAX_NAME: usize = 64;

/// The object holding the description of the pool named `name`.
pub fn object_name(name: &str) -> String {
    format!("{OBJECT_PREFIX}{name}")
}

/// A pool name is 1 to 64 letters, digits, `.`, `_` and `-`, not starting
/// with `.`.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "{name:?} is not a pool name: 1 to {MAX_NAME} letters, digits, '.', '_' or '-', not starting with '.'"
        )))
    }
}

/// The value of a `KEY = VALUE` line of pool.conf.
pub(super) fn setting<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.strip_prefix(key)?.trim_start().strip_prefix('=').map(str::trim)
}

/// The device named by a (trimmed) device line.
fn device_of(line: &str) -> &str {
    super::device_of(line).unwrap_or(line)
}

/// What a pool.conf text says of its pool's place in a cluster.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Description {
    pub name: Option<String>,
    pub id: Option<String>,
    pub revision: u64,
    /// The first rados device: where the description lives.
    pub home: Option<RadosSpec>,
}

/// Reads what a pool.conf text says of its pool's place in a cluster,
/// refusing a bad name, revision or rados device line.
pub fn describe(text: &str) -> Result<Description> {
    let mut d = Description::default();
    for line in text.lines().map(str::trim) {
        if let Some(v) = setting(line, "name") {
            check_name(v)?;
            d.name = Some(v.to_string());
        } else if let Some(v) = setting(line, "id") {
            d.id = Some(v.to_string());
        } else if let Some(v) = setting(line, "revision") {
            d.revision =
                v.parse().map_err(|_| Error::Invalid(format!("{POOL_FILE}: revision {v:?} is not a number")))?;
        } else if is_device_line(line) && d.home.is_none() && is_rados(device_of(line)) {
            d.home = Some(RadosSpec::parse(device_of(line))?);
        }
    }
    Ok(d)
}

/// Whether a (trimmed) line is shared with the cluster's copy.
fn shared_line(line: &str) -> bool {
    is_device_line(line) || ["sim", "name", "id", "revision"].iter().any(|k| setting(line, k).is_some())
}

/// The lines of `text` this host keeps to itself (numa, fault, comments).
fn local_lines(text: &str) -> String {
    text.lines().filter(|l| !shared_line(l.trim())).map(|l| format!("{l}\n")).collect()
}

/// The shared lines of `text`, every rados device line naming the config
/// `from` made to name `to` instead.
fn shared_lines(text: &str, from: &Path, to: &Path) -> Result<String> {
    let mut out = String::new();
    for line in text.lines().filter(|l| shared_line(l.trim())) {
        let t = line.trim();
        if is_device_line(t) && is_rados(device_of(t)) {
            let mut spec = RadosSpec::parse(device_of(t))?;
            if spec.conf == from {
                spec.conf = to.to_path_buf();
            }
            out.push_str(&format!("device = {spec}\n"));
        } else {
            out.push_str(t);
            out.push('\n');
        }
    }
    Ok(out)
}

/// `text` with its revision raised by one, when it names its pool (what
/// [`super::replace_pool_file`] writes).
pub(super) fn next_revision(text: &str) -> Result<String> {
    let d = describe(text)?;
    if d.name.is_none() {
        return Ok(text.to_string());
    }
    let mut out: String =
        text.lines().filter(|l| setting(l.trim(), "revision").is_none()).map(|l| format!("{l}\n")).collect();
    out.push_str(&format!("revision = {}\n", d.revision + 1));
    Ok(out)
}

/// The lines naming a new pool in its cluster (mkfs): its name, its id,
/// revision 1.
pub(super) fn naming_lines(name: &str, pool_id: &[u8; 16]) -> String {
    let hex: String = pool_id.iter().map(|b| format!("{b:02x}")).collect();
    format!("# found from other hosts as rados:CEPHPOOL/{name}?conf=PATH\nname = {name}\nid = {hex}\nrevision = 1\n")
}

/// Fails with [`Error::Exists`] when the RADOS pool of `home` already
/// holds a pool named `name` (mkfs checks before it formats anything).
pub fn check_free(home: &RadosSpec, name: &str) -> Result<()> {
    check_name(name)?;
    match crate::device::rados_spec::read_object(&home.conf, &home.pool, &object_name(name))? {
        Some(_) => Err(taken(home, name)),
        None => Ok(()),
    }
}

fn taken(home: &RadosSpec, name: &str) -> Error {
    let obj = object_name(name);
    Error::Exists(format!(
        "a pool named {name} is already in RADOS pool {} (object {obj}): name this one otherwise, or remove \
         that object if its pool is gone (rados -p {} rm {obj})",
        home.pool, home.pool
    ))
}

/// Publishes `text` (a pool directory's new pool.conf) when it names its
/// pool; `create`: the first publication (mkfs), refused if the name is
/// taken.
pub(super) fn publish(text: &str, create: bool) -> Result<()> {
    publish_on(text, create, &mut RadosConnections::default())
}

/// [`publish`] through open connections.
fn publish_on(text: &str, create: bool, conns: &mut RadosConnections) -> Result<()> {
    let d = describe(text)?;
    let (Some(name), Some(home)) = (&d.name, &d.home) else { return Ok(()) };
    let shared = shared_lines(text, &home.conf, &home.conf)?;
    let obj = object_name(name);
    match conns.write_object(&home.conf, &home.pool, &obj, shared.as_bytes(), create) {
        Err(Error::Exists(_)) => Err(taken(home, name)),
        r => r,
    }
}

/// After a device was added to the pool of directory `dir` (id
/// `pool_id`): if it is the pool's first rados device, the pool takes the
/// directory's name in that device's cluster, as mkfs would have named it.
/// A name that is taken, or that is not a pool name, leaves the pool
/// unnamed, with a warning: the device is added either way.
pub fn name_after_add(dir: &Path, pool_id: &[u8; 16]) -> Result<()> {
    let f = dir.join(POOL_FILE);
    let text = super::read_pool_text(dir).map_err(|e| Error::io(f.display().to_string(), e))?;
    let d = describe(&text)?;
    let (None, Some(home)) = (&d.name, &d.home) else { return Ok(()) };
    let Some(name) = dir.file_name().and_then(|n| n.to_str()) else { return Ok(()) };
    let named = check_free(home, name).and_then(|()| {
        let mut out = text.clone();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&naming_lines(name, pool_id));
        publish(&out, true)?;
        super::write_pool_text(dir, &out)
    });
    if let Err(e) = named {
        tracing::warn!(
            "{}: the pool has no name in its cluster ({e}): other hosts cannot find it by name",
            dir.display()
        );
    }
    Ok(())
}

/// Brings the pool directory `dir` and its cluster's copy of its
/// description to the same revision (module docs), through `conns` (those
/// the pool's devices and lease then use). Nothing for a pool without a
/// name.
pub fn sync(dir: &Path, conns: &mut RadosConnections) -> Result<()> {
    let f = dir.join(POOL_FILE);
    let text = super::read_pool_text(dir).map_err(|e| Error::io(f.display().to_string(), e))?;
    let local = describe(&text)?;
    let (Some(name), Some(home)) = (&local.name, &local.home) else { return Ok(()) };
    let Some(bytes) = conns.read_object(&home.conf, &home.pool, &object_name(name))? else {
        tracing::info!("{}: the cluster has no copy of this pool's description: published again", f.display());
        return publish_on(&text, false, conns);
    };
    let here = Locator { pool: home.pool.clone(), name: name.clone(), conf: home.conf.clone() };
    let (fresh, theirs) = take(&bytes, &here, &text)?;
    if theirs.id != local.id {
        tracing::warn!(
            "{}: the name {name} in RADOS pool {} belongs to another pool now (id {}): this directory's \
             description is neither updated from it nor published",
            f.display(),
            home.pool,
            theirs.id.as_deref().unwrap_or("none")
        );
        return Ok(());
    }
    if theirs.revision < local.revision {
        return publish_on(&text, false, conns);
    }
    if theirs.revision > local.revision {
        tracing::info!(
            "{}: the device list changed elsewhere (revision {} to {}): taken from the cluster",
            f.display(),
            local.revision,
            theirs.revision
        );
        return super::write_pool_text(dir, &fresh);
    }
    Ok(())
}

/// The cluster's description of the pool `loc` names (`bytes`, its object
/// as read), checked and made this host's: it must be text naming `loc`'s
/// pool, with a first rados device (its home) in `loc`'s RADOS pool. Every
/// device line that named the home's config names `loc.conf` instead, and
/// this host's own lines of `local` (an earlier pool.conf: `numa`, `fault`,
/// comments) follow. Returns the new pool.conf and what it describes.
pub fn take(bytes: &[u8], loc: &Locator, local: &str) -> Result<(String, Description)> {
    let what = format!("rados:{}/{}", loc.pool, object_name(&loc.name));
    let text = std::str::from_utf8(bytes).map_err(|_| Error::corrupt(&what, "not text"))?;
    super::check_text(text, &what)?;
    let d = describe(text)?;
    let home = d.home.as_ref().ok_or_else(|| Error::corrupt(&what, "a pool description without a rados device"))?;
    if home.pool != loc.pool || d.name.as_deref() != Some(loc.name.as_str()) {
        return Err(Error::corrupt(&what, "describes a pool of another name or RADOS pool"));
    }
    let fresh = shared_lines(text, &home.conf, &loc.conf)? + &local_lines(local);
    Ok((fresh, d))
}

/// How other hosts find the pool of directory `dir`
/// (`rados:CEPHPOOL/NAME?conf=PATH`, with this host's config path), or None
/// for a pool without a name in a cluster.
pub fn locator_of(dir: &Path) -> Result<Option<String>> {
    let f = dir.join(POOL_FILE);
    let text = super::read_pool_text(dir).map_err(|e| Error::io(f.display().to_string(), e))?;
    let d = describe(&text)?;
    Ok(match (d.name, d.home) {
        (Some(name), Some(home)) => Some(format!("rados:{}/{name}?conf={}", home.pool, home.conf.display())),
        _ => None,
    })
}

/// A pool named by a locator, `rados:CEPHPOOL/NAME?conf=PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locator {
    pub pool: String,
    pub name: String,
    pub conf: PathBuf,
}

impl Locator {
    pub fn parse(s: &str) -> Result<Locator> {
        let bad = |why: String| {
            Error::Invalid(format!("{s}: {why} (a pool in a Ceph cluster is found as rados:CEPHPOOL/NAME?conf=PATH)"))
        };
        let spec = RadosSpec::parse(s).map_err(|e| bad(e.to_string()))?;
        let name = spec.prefix.ok_or_else(|| bad("no pool NAME".into()))?;
        if spec.size.is_some() {
            return Err(bad("size= names a device, not a pool".into()));
        }
        check_name(&name).map_err(|e| bad(e.to_string()))?;
        Ok(Locator { pool: spec.pool, name, conf: spec.conf })
    }

    /// This host's directory for the pool under `root`: `root/CEPHPOOL/NAME`.
    pub fn dir(&self, root: &Path) -> PathBuf {
        root.join(&self.pool).join(&self.name)
    }
}

/// Where this host keeps the directories of pools found by name:
/// `$HURRICANE_POOLS`, else `/var/lib/hurricane/pools` for root, else
/// `$XDG_STATE_HOME/hurricane/pools` (`~/.local/state/hurricane/pools`).
pub fn local_root() -> PathBuf {
    if let Some(p) = std::env::var_os("HURRICANE_POOLS").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if rustix::process::geteuid().is_root() {
        return PathBuf::from("/var/lib/hurricane/pools");
    }
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir);
    state.join("hurricane/pools")
}

/// The pool directory on this host for the pool `locator` names
/// (`rados:CEPHPOOL/NAME?conf=PATH`), made or brought up to date from the
/// cluster's copy of its description under `root`, every device in the
/// description's home cluster reached through `conf`.
pub fn locate(locator: &str, root: &Path) -> Result<PathBuf> {
    let mut loc = Locator::parse(locator)?;
    loc.conf = std::fs::canonicalize(&loc.conf).map_err(|e| Error::io(loc.conf.display().to_string(), e))?;
    let obj = object_name(&loc.name);
    let Some(bytes) = crate::device::rados_spec::read_object(&loc.conf, &loc.pool, &obj)? else {
        return Err(Error::NotFound(format!(
            "no pool named {} in RADOS pool {} of {} (no object {obj})",
            loc.name,
            loc.pool,
            loc.conf.display()
        )));
    };
    let dir = loc.dir(root);
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(dir.display().to_string(), e))?;
    let f = dir.join(POOL_FILE);
    let old = match super::read_pool_text(&dir) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(f.display().to_string(), e)),
    };
    let (fresh, _) = take(&bytes, &loc, old.as_deref().unwrap_or(""))?;
    if old.as_deref() != Some(fresh.as_str()) {
        super::write_pool_text(&dir, &fresh)?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str =
        "# Hurricane pool\ndevice = /img/dev0.img\ndevice = rados:hfs/hurricane.ab.1?conf=/a/ceph.conf&size=64\n\
device = rados:other/x?conf=/b/ceph.conf&size=64\nnuma = 0 1\nsim = hdd\nname = web\nid = ab\nrevision = 3\n";

    #[test]
    fn reads_what_a_description_says() {
        let d = describe(TEXT).unwrap();
        assert_eq!((d.name.as_deref(), d.id.as_deref(), d.revision), (Some("web"), Some("ab"), 3));
        assert_eq!(d.home.unwrap().prefix.as_deref(), Some("hurricane.ab.1"));
        // The device list is what it was: the new lines are not devices.
        let devs: Vec<&str> = TEXT.lines().map(str::trim).filter(|l| is_device_line(l)).collect();
        assert_eq!(devs.len(), 3, "{devs:?}");
    }

    #[test]
    fn shares_the_devices_and_keeps_this_hosts_lines() {
        let s = shared_lines(TEXT, Path::new("/a/ceph.conf"), Path::new("/mine.conf")).unwrap();
        assert!(s.contains("rados:hfs/hurricane.ab.1?conf=/mine.conf&size=64"), "{s}");
        assert!(s.contains("rados:other/x?conf=/b/ceph.conf"), "another cluster keeps its config: {s}");
        assert!(s.contains("sim = hdd") && s.contains("revision = 3") && !s.contains("numa"), "{s}");
        let l = local_lines(TEXT);
        assert_eq!(l, "# Hurricane pool\nnuma = 0 1\n");
    }

    #[test]
    fn each_change_raises_the_revision() {
        let t = next_revision(TEXT).unwrap();
        assert_eq!(describe(&t).unwrap().revision, 4);
        assert_eq!(t.matches("revision").count(), 1, "{t}");
        // A pool without a name is left as it is.
        assert_eq!(next_revision("device = a\n").unwrap(), "device = a\n");
    }

    #[test]
    fn names_and_locators() {
        for ok in ["web", "a.b_c-9", &"x".repeat(MAX_NAME)] {
            check_name(ok).unwrap();
        }
        for bad in ["", ".hidden", "a/b", "a b", "é", &"x".repeat(MAX_NAME + 1)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        let l = Locator::parse("rados:hfs/web?conf=/etc/ceph/ceph.conf").unwrap();
        assert_eq!((l.pool.as_str(), l.name.as_str()), ("hfs", "web"));
        assert_eq!(l.dir(Path::new("/r")), PathBuf::from("/r/hfs/web"));
        for (bad, why) in [
            ("rados:hfs?conf=c", "no pool NAME"),
            ("rados:hfs/web?conf=c&size=1G", "names a device"),
            ("rados:hfs/.x?conf=c", "not a pool name"),
            ("rados:hfs/web", "no conf"),
        ] {
            let e = Locator::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("rados:CEPHPOOL/NAME?conf=PATH"), "{bad}: {e}");
        }
    }

    #[test]
    fn takes_a_description_for_this_host_and_refuses_another_pools() {
        let loc = Locator { pool: "hfs".into(), name: "web".into(), conf: PathBuf::from("/mine.conf") };
        let (text, d) = take(TEXT.as_bytes(), &loc, "# here\nnuma = 1 0\nsim = x\n").unwrap();
        assert_eq!((d.revision, d.id.as_deref()), (3, Some("ab")));
        assert!(text.contains("hurricane.ab.1?conf=/mine.conf") && text.ends_with("# here\nnuma = 1 0\n"), "{text}");
        assert!(!text.contains("numa = 0 1"), "the other host's numa line is not taken: {text}");
        assert_eq!(take(text.as_bytes(), &loc, "# here\nnuma = 1 0\n").unwrap().0, text, "taken twice");
        for (l, why) in [
            (Locator { name: "db".into(), ..loc.clone() }, "another name"),
            (Locator { pool: "x".into(), ..loc.clone() }, "another name"),
        ] {
            let e = take(TEXT.as_bytes(), &l, "").unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
        assert!(take(b"\xff\xfe", &loc, "").unwrap_err().to_string().contains("not text"));
        assert!(take(b"name = web\n", &loc, "").unwrap_err().to_string().contains("without a rados device"));
    }

    #[test]
    fn refuses_a_bad_name_or_revision_in_pool_conf() {
        assert!(describe("name = a/b\n").is_err());
        assert!(describe("revision = x\n").is_err());
    }
}
