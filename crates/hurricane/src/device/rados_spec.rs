//! How a pool names a device in a Ceph cluster, in `pool.conf` and on the
//! mkfs command line: `rados:POOL[/PREFIX]?conf=PATH&size=SIZE`. Parsed in
//! every build, so a build without the `rados` feature can say what it
//! cannot open.

use super::Device;
use crate::error::{Error, Result};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What starts a device name that is a rados device.
pub const RADOS_SCHEME: &str = "rados:";

/// Whether a device name (a `pool.conf` line, a `--device` value) names a
/// rados device rather than a path.
pub fn is_rados(name: &str) -> bool {
    name.starts_with(RADOS_SCHEME)
}

/// A rados device named by `rados:POOL[/PREFIX]?conf=PATH&size=SIZE`: the
/// RADOS pool, the prefix of its objects' names (docs/FORMAT.md; mkfs picks
/// one from the pool id when none is given), the cluster's config file and
/// the device's size (a `K`/`M`/`G`/`T` size).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RadosSpec {
    pub pool: String,
    pub prefix: Option<String>,
    pub conf: PathBuf,
    pub size: Option<u64>,
}

impl RadosSpec {
    pub fn parse(s: &str) -> Result<RadosSpec> {
        let bad = |why: &str| {
            Error::Invalid(format!("{s}: {why} (a rados device is rados:POOL[/PREFIX]?conf=PATH&size=SIZE)"))
        };
        let rest = s.strip_prefix(RADOS_SCHEME).ok_or_else(|| bad("does not start with rados:"))?;
        let (target, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (pool, prefix) = match target.split_once('/') {
            Some((p, x)) => (p, Some(x)),
            None => (target, None),
        };
        if pool.is_empty() {
            return Err(bad("no RADOS pool named"));
        }
        if prefix.is_some_and(|x| x.is_empty() || x.contains('/')) {
            return Err(bad("the object prefix after the pool must be one non-empty name"));
        }
        let (mut conf, mut size) = (None, None);
        for item in query.split('&').filter(|i| !i.is_empty()) {
            let (k, v) = item.split_once('=').ok_or_else(|| bad(&format!("{item:?} is not key=value")))?;
            match k {
                "conf" if !v.is_empty() => conf = Some(PathBuf::from(v)),
                "size" => size = Some(crate::units::parse_size(v).map_err(|e| bad(&format!("size {v:?}: {e}")))?),
                "conf" => return Err(bad("conf is empty")),
                _ => return Err(bad(&format!("unknown key {k:?}"))),
            }
        }
        let conf = conf.ok_or_else(|| bad("no conf=PATH (the cluster's ceph.conf)"))?;
        if s.contains('\0') {
            return Err(bad("contains a NUL byte"));
        }
        Ok(RadosSpec { pool: pool.to_string(), prefix: prefix.map(str::to_string), conf, size })
    }
}

impl std::fmt::Display for RadosSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{RADOS_SCHEME}{}", self.pool)?;
        if let Some(p) = &self.prefix {
            write!(f, "/{p}")?;
        }
        write!(f, "?conf={}", self.conf.display())?;
        if let Some(s) = self.size {
            write!(f, "&size={s}")?;
        }
        Ok(())
    }
}

/// The object-name prefix of device `index` of the pool `pool_id`
/// (docs/FORMAT.md, "Devices in RADOS").
pub fn object_prefix(pool_id: &[u8; 16], index: u32) -> String {
    let hex: String = pool_id.iter().map(|b| format!("{b:02x}")).collect();
    format!("hurricane.{hex}.{index}")
}

/// The most replacements one device index is named for
/// ([`new_device`]'s `.K` suffixes).
const MAX_GENERATIONS: u32 = 1000;

/// A new device for slot `index` of the pool `pool_id` in a Ceph cluster
/// (`device add`, `device replace`), named by `name`
/// (`rados:POOL[/PREFIX]?conf=PATH[&size=SIZE]`), `size` bytes unless the
/// name says. Its objects' prefix is the name's, else the first of
/// `hurricane.<id>.<index>`, `hurricane.<id>.<index>.1`, `.2`, ... whose
/// first chunk's object is absent: every device writes its superblocks to
/// its first chunk, so a prefix that has one held a device, and a
/// replacement must not find a former device's stale objects (old journal
/// records among them). A given prefix that held a device is refused.
/// Opened through `conns` (an open pool's, `Fs::rados_connections`, so
/// that fencing its writer covers the new device too). Returns the device
/// and its name for pool.conf (prefix, size and the config's full path
/// written out).
pub fn new_device(
    name: &str,
    pool_id: &[u8; 16],
    index: u32,
    size: u64,
    conns: &mut RadosConnections,
) -> Result<(Arc<dyn Device>, RadosSpec)> {
    let mut spec = RadosSpec::parse(name)?;
    spec.conf = std::fs::canonicalize(&spec.conf).map_err(|e| Error::io(spec.conf.display().to_string(), e))?;
    spec.size = Some(spec.size.unwrap_or(size));
    let first_chunk = |prefix: &str| format!("{prefix}.{:016x}", 0);
    let used = |prefix: &str| object_exists(&spec.conf, &spec.pool, &first_chunk(prefix));
    match &spec.prefix {
        Some(p) => {
            if used(p)? {
                return Err(Error::Exists(format!(
                    "rados:{}/{p}: these objects hold a device already (its first chunk {} is there)",
                    spec.pool,
                    first_chunk(p)
                )));
            }
        }
        None => {
            let base = object_prefix(pool_id, index);
            let mut found = None;
            for k in 0..MAX_GENERATIONS {
                let p = if k == 0 { base.clone() } else { format!("{base}.{k}") };
                if !used(&p)? {
                    found = Some(p);
                    break;
                }
            }
            spec.prefix = Some(found.ok_or_else(|| {
                Error::Exists(format!("rados:{}/{base}: {MAX_GENERATIONS} devices named after it already", spec.pool))
            })?);
        }
    }
    let dev = conns.open_device(&spec)?;
    Ok((dev, spec))
}

/// The path to read the cluster config `conf` (a device's `conf=PATH`)
/// through. A process run by root refuses a config that another user owns
/// or can change, or that is in a directory another user controls
/// ([`crate::dirfile::untrusted`]): librados takes from it where the
/// cluster is and which keyring to read, with root's rights, and a pool
/// directory (pool.conf naming the config) is often its user's. For root
/// the path returned is the config's real path, every link resolved, so
/// what was checked is what is read.
pub fn trusted_conf(conf: &std::path::Path) -> Result<PathBuf> {
    if !rustix::process::geteuid().is_root() {
        return Ok(conf.to_path_buf());
    }
    if let Some(why) = crate::dirfile::untrusted(conf)? {
        return Err(Error::Perm(format!(
            "{}: a cluster config root reads must be root's alone, and {why} (make the file and its directories \
             root's, not writable by others)",
            conf.display()
        )));
    }
    std::fs::canonicalize(conf).map_err(|e| Error::io(conf.display().to_string(), e))
}

/// Whether the object `object` of the RADOS pool `pool` in the cluster of
/// `conf` is there.
pub fn object_exists(conf: &std::path::Path, pool: &str, object: &str) -> Result<bool> {
    RadosConnections::default().object_exists(conf, pool, object)
}

/// The cluster connections the rados devices of one pool, and its writer's
/// lease, share: one per config file. One connection is one client address
/// to the cluster, so the next writer's blocklisting of the address the
/// lease recorded fences the devices' writes too (`rados.rs`).
#[derive(Default)]
pub struct RadosConnections {
    #[cfg(feature = "rados")]
    open: Vec<(PathBuf, Arc<super::rados::RadosCluster>)>,
}

impl RadosConnections {
    /// Opens the device `spec` names, whose prefix and size are given,
    /// connecting to its cluster unless a device before it did.
    #[cfg(feature = "rados")]
    pub fn open_device(&mut self, spec: &RadosSpec) -> Result<Arc<dyn Device>> {
        use super::rados::RadosDevice;
        let (Some(prefix), Some(size)) = (&spec.prefix, spec.size) else {
            return Err(Error::Invalid(format!("{spec}: a pool's rados device needs its /PREFIX and size=SIZE")));
        };
        let cluster = self.cluster(&spec.conf)?;
        Ok(Arc::new(RadosDevice::open(cluster, &spec.pool, prefix, size)?))
    }

    /// The connection to the cluster of the config file `conf`, made on
    /// first use.
    /// A config root may not trust is refused ([`trusted_conf`]).
    #[cfg(feature = "rados")]
    pub fn cluster(&mut self, conf: &std::path::Path) -> Result<Arc<super::rados::RadosCluster>> {
        use super::rados::{RadosCluster, RadosOptions};
        if let Some((_, c)) = self.open.iter().find(|(c, _)| c == conf) {
            return Ok(c.clone());
        }
        let c = RadosCluster::connect(&trusted_conf(conf)?, &RadosOptions::default())?;
        self.open.push((conf.to_path_buf(), c.clone()));
        Ok(c)
    }

    /// A build without the `rados` feature opens no rados device.
    #[cfg(not(feature = "rados"))]
    pub fn open_device(&mut self, spec: &RadosSpec) -> Result<Arc<dyn Device>> {
        Err(Error::NotSupported(format!("{spec}: this build has no rados devices (cargo feature rados)")))
    }

    /// [`read_object`] through these connections.
    pub fn read_object(&mut self, conf: &std::path::Path, pool: &str, object: &str) -> Result<Option<Vec<u8>>> {
        #[cfg(feature = "rados")]
        {
            super::rados_objects::RadosObjects::on(self.cluster(conf)?, pool)?.read(object)
        }
        #[cfg(not(feature = "rados"))]
        {
            Err(no_rados(conf, pool, object))
        }
    }

    /// [`write_object`] through these connections.
    pub fn write_object(
        &mut self,
        conf: &std::path::Path,
        pool: &str,
        object: &str,
        data: &[u8],
        exclusive: bool,
    ) -> Result<()> {
        #[cfg(feature = "rados")]
        {
            super::rados_objects::RadosObjects::on(self.cluster(conf)?, pool)?.write(object, data, exclusive)
        }
        #[cfg(not(feature = "rados"))]
        {
            let _ = (data, exclusive);
            Err(no_rados(conf, pool, object))
        }
    }

    /// [`object_exists`] through these connections.
    pub fn object_exists(&mut self, conf: &std::path::Path, pool: &str, object: &str) -> Result<bool> {
        #[cfg(feature = "rados")]
        {
            super::rados_objects::RadosObjects::on(self.cluster(conf)?, pool)?.exists(object)
        }
        #[cfg(not(feature = "rados"))]
        {
            Err(no_rados(conf, pool, object))
        }
    }
}

/// The whole object `object` of the RADOS pool `pool` in the cluster of
/// `conf`, or None when there is none (small objects: a pool's
/// description).
pub fn read_object(conf: &std::path::Path, pool: &str, object: &str) -> Result<Option<Vec<u8>>> {
    RadosConnections::default().read_object(conf, pool, object)
}

/// Replaces the object `object` of the RADOS pool `pool` in the cluster of
/// `conf` with `data`, atomically; with `exclusive`, [`Error::Exists`] if
/// it is there.
pub fn write_object(conf: &std::path::Path, pool: &str, object: &str, data: &[u8], exclusive: bool) -> Result<()> {
    RadosConnections::default().write_object(conf, pool, object, data, exclusive)
}

#[cfg(not(feature = "rados"))]
fn no_rados(conf: &std::path::Path, pool: &str, object: &str) -> Error {
    Error::NotSupported(format!(
        "rados:{pool}/{object} (cluster of {}): this build has no rados devices (cargo feature rados)",
        conf.display()
    ))
}

/// How long a pool's writer's lease lasts without renewal unless the
/// pool's opener says (`Options::lease_duration`).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(30);

/// The shortest lease a writer may take: renewals come every third of it.
pub const MIN_LEASE_DURATION: Duration = Duration::from_secs(1);

/// The lease a writer of a pool with devices in a Ceph cluster holds
/// (`rados.rs`, "One writer at a time"): taken before the pool is opened
/// for writing, held until it is closed. Other pools need none.
#[derive(Default)]
pub struct PoolLease {
    #[cfg(feature = "rados")]
    lease: Option<super::rados::RadosLease>,
}

impl PoolLease {
    /// For a pool whose devices are `paths` (as pool.conf lists them),
    /// opened for writing: the lease on the object `PREFIX.lease` beside
    /// its first rados device, lasting `duration` without renewal (at
    /// least [`MIN_LEASE_DURATION`]), or [`Error::Busy`] naming the writer
    /// that holds it. Nothing for a pool without rados devices, or
    /// read-only. The lease is taken on the connections of `conns` that the
    /// pool's devices are then opened through, one per cluster: a previous
    /// writer that did not release it is fenced (blocklisted) in each
    /// cluster before this returns.
    pub fn take(
        paths: &[PathBuf],
        writable: bool,
        duration: Duration,
        conns: &mut RadosConnections,
    ) -> Result<PoolLease> {
        let first = paths.iter().filter_map(|p| p.to_str()).find(|n| is_rados(n));
        let Some(name) = first.filter(|_| writable) else { return Ok(PoolLease::default()) };
        if duration < MIN_LEASE_DURATION {
            return Err(Error::Invalid(format!(
                "a lease of {duration:?} is too short (at least {}s: it is renewed every third of it)",
                MIN_LEASE_DURATION.as_secs()
            )));
        }
        let spec = RadosSpec::parse(name)?;
        // The config files of the pool's other clusters, once each.
        let mut others: Vec<PathBuf> = Vec::new();
        for n in paths.iter().filter_map(|p| p.to_str()).filter(|n| is_rados(n)) {
            let conf = RadosSpec::parse(n)?.conf;
            if conf != spec.conf && !others.contains(&conf) {
                others.push(conf);
            }
        }
        Self::take_for(&spec, &others, duration, conns)
    }

    #[cfg(feature = "rados")]
    fn take_for(
        spec: &RadosSpec,
        others: &[PathBuf],
        duration: Duration,
        conns: &mut RadosConnections,
    ) -> Result<PoolLease> {
        use super::rados::RadosLease;
        let Some(prefix) = &spec.prefix else {
            return Err(Error::Invalid(format!("{spec}: a pool's rados device needs its /PREFIX")));
        };
        let cluster = conns.cluster(&spec.conf)?;
        let others = others.iter().map(|c| conns.cluster(c)).collect::<Result<Vec<_>>>()?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string());
        let host = host.unwrap_or_else(|_| "unknown".into());
        let holder = format!("host {host} pid {}", std::process::id());
        let lease = RadosLease::take_with(cluster, others, &spec.pool, &format!("{prefix}.lease"), &holder, duration)?;
        Ok(PoolLease { lease: Some(lease) })
    }

    /// Without the `rados` feature its devices do not open: no lease.
    #[cfg(not(feature = "rados"))]
    fn take_for(
        _spec: &RadosSpec,
        _others: &[PathBuf],
        _duration: Duration,
        _conns: &mut RadosConnections,
    ) -> Result<PoolLease> {
        Ok(PoolLease::default())
    }

    /// Set once the lease is lost (a renewal failed): the pool must not be
    /// written any more. None when there is no lease.
    pub fn lost_flag(&self) -> Option<Arc<std::sync::atomic::AtomicBool>> {
        #[cfg(feature = "rados")]
        {
            self.lease.as_ref().map(|l| l.lost_flag())
        }
        #[cfg(not(feature = "rados"))]
        {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_back() {
        let s = RadosSpec::parse("rados:hfs/hurricane.ab.1?conf=/etc/ceph/ceph.conf&size=64M").unwrap();
        assert_eq!(s.pool, "hfs");
        assert_eq!(s.prefix.as_deref(), Some("hurricane.ab.1"));
        assert_eq!(s.conf, PathBuf::from("/etc/ceph/ceph.conf"));
        assert_eq!(s.size, Some(64 << 20));
        assert_eq!(s.to_string(), "rados:hfs/hurricane.ab.1?conf=/etc/ceph/ceph.conf&size=67108864");
        assert_eq!(RadosSpec::parse(&s.to_string()).unwrap(), s);
        let s = RadosSpec::parse("rados:hfs?size=1G&conf=c.conf").unwrap();
        assert_eq!((s.prefix, s.size), (None, Some(1 << 30)));
        assert!(is_rados("rados:x?conf=y") && !is_rados("/dev/rados:x"));
    }

    #[cfg(not(feature = "rados"))]
    #[test]
    fn a_build_without_the_feature_opens_none() {
        let spec = RadosSpec::parse("rados:p/x?conf=c&size=1M").unwrap();
        let e = RadosConnections::default().open_device(&spec).err().unwrap().to_string();
        assert!(e.contains("cargo feature rados"), "{e}");
    }

    /// Root does not read a cluster config another user owns or can
    /// change (a device line of a pool directory she owns may name hers).
    #[test]
    fn root_refuses_a_config_another_user_controls() {
        let t = tempfile::tempdir().unwrap();
        let conf = t.path().join("ceph.conf");
        std::fs::write(&conf, "[global]\n").unwrap();
        let link = t.path().join("link.conf");
        std::os::unix::fs::symlink(&conf, &link).unwrap();
        if !rustix::process::geteuid().is_root() {
            assert_eq!(trusted_conf(&link).unwrap(), link, "a user's own configs are hers to read");
            return;
        }
        assert_eq!(trusted_conf(&link).unwrap(), std::fs::canonicalize(&conf).unwrap());
        std::os::unix::fs::chown(&conf, Some(65534), None).unwrap();
        let e = trusted_conf(&link).unwrap_err();
        assert!(matches!(e, Error::Perm(_)), "{e}");
        let e = e.to_string();
        assert!(e.contains("owned by uid 65534") && e.contains("link.conf"), "{e}");
        std::os::unix::fs::chown(&conf, Some(0), None).unwrap();
        std::os::unix::fs::chown(t.path(), Some(65534), None).unwrap();
        let e = trusted_conf(&conf).unwrap_err().to_string();
        assert!(e.contains("its directory") && e.contains("uid 65534"), "{e}");
        std::os::unix::fs::chown(t.path(), Some(0), None).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&conf, std::fs::Permissions::from_mode(0o646)).unwrap();
        let e = trusted_conf(&conf).unwrap_err().to_string();
        assert!(e.contains("written by other users"), "{e}");
    }

    #[test]
    fn refuses_what_it_cannot_name() {
        for (bad, why) in [
            ("rados:?conf=c", "no RADOS pool"),
            ("rados:p/?conf=c", "object prefix"),
            ("rados:p/a/b?conf=c", "object prefix"),
            ("rados:p", "no conf"),
            ("rados:p?conf=", "conf is empty"),
            ("rados:p?conf=c&size=lots", "size \"lots\""),
            ("rados:p?conf=c&user=x", "unknown key \"user\""),
            ("rados:p?conf", "is not key=value"),
            ("/tmp/x", "does not start"),
        ] {
            let e = RadosSpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("rados:POOL[/PREFIX]"), "{bad}: {e}");
        }
    }
}
