//! Mount options: the `-o` list of `hurricane mount`, `mount -t
//! fuse.hurricane` and /etc/fstab, turned into a fuser configuration.

use crate::names::NameCache;
use fuser::{Config, MountOption, SessionACL};
use std::path::PathBuf;
use std::time::Duration;

/// Threads serving requests, at least, for a pool with devices over the
/// network (`MountOptions::for_pool`): twice `rados bench`'s default
/// operations in flight.
pub const REMOTE_THREADS: usize = 32;

/// Requests the kernel keeps in flight in the background (read-ahead,
/// releases) before it counts the mount congested at three quarters of it
/// and skips read-ahead: for local devices, and (`for_pool`) for devices
/// over the network, where each request waits for a round trip and 16
/// sequential readers each keep several 1 MiB reads in flight.
pub const LOCAL_BACKGROUND: u16 = 64;
pub const REMOTE_BACKGROUND: u16 = 256;

/// When a read updates an access time (the kernel leaves a FUSE file's
/// atime to the mount).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Atime {
    /// `noatime`: never.
    Never,
    /// `relatime` (the default): when the access time is not later than
    /// the last modification or change, or is a day old.
    Relative,
    /// `strictatime`: on every read that reaches the mount.
    Strict,
}

/// What the `-o` options ask for.
#[derive(Debug, Clone)]
pub struct MountOptions {
    pub allow_other: bool,
    pub allow_root: bool,
    /// Have the kernel check permissions too (`default_permissions`): it
    /// then refreshes a directory's attributes after every change to it,
    /// one more round trip per create or unlink. Always on with
    /// `allow_other`: opens of FIFOs and device nodes never reach the
    /// engine, so only the kernel can check them. Otherwise the engine
    /// checks every request alone and the kernel keeps only names every
    /// user may reach (see `NameCache`).
    pub kernel_permissions: bool,
    pub read_only: bool,
    pub auto_unmount: bool,
    /// When reads update access times (`noatime`, `relatime`,
    /// `strictatime`), and whether directories' are left alone
    /// (`nodiratime`).
    pub atime: Atime,
    pub nodiratime: bool,
    /// Kernel mount flags passed through (nodev, noexec, noatime, ...).
    pub flags: Vec<MountOption>,
    pub fsname: Option<String>,
    pub subtype: String,
    /// Threads reading requests from the kernel (default: one per core, 4..32).
    pub threads: Option<usize>,
    /// How long the kernel may cache attributes and names.
    pub attr_timeout: Duration,
    /// Log file of a background mount (default: POOL/hurricane-mount.log).
    pub log: Option<PathBuf>,
    /// How often the engine commits its journal without an fsync.
    pub commit_interval: Option<Duration>,
    /// How long the writer's lease of a pool with devices in a Ceph
    /// cluster lasts without renewal (`lease=SECS`, default 30).
    pub lease: Option<Duration>,
    /// Memory bound of the engine's block cache in bytes (0: none).
    pub cache_bytes: Option<u64>,
    /// Inodes the meta-data cache holds (`inode_cache=N`).
    pub inode_cache: Option<usize>,
    /// Directory entries read from the meta-data store kept for the next
    /// lookup (`entry_cache=N`, 0 turns it off).
    pub entry_cache: Option<usize>,
    /// Memory for the meta-data store's page cache (`meta_cache=SIZE`).
    pub meta_cache_bytes: Option<u64>,
    /// Serve requests through per-CPU io_uring queues where the kernel
    /// offers FUSE over io_uring (as root, the mount turns the kernel's
    /// `enable_uring` on); `nouring` keeps to /dev/fuse reads.
    pub uring: bool,
    /// Whether `uring` or `nouring` was given (else the pool's devices
    /// decide, see `for_pool`).
    pub uring_chosen: bool,
    /// Let the kernel cache writes and send them later, merged
    /// (`writeback_cache`; off by default, see `docs/ARCHITECTURE.md`).
    pub writeback_cache: bool,
    /// The kernel's background request limit (`LOCAL_BACKGROUND`, or
    /// `REMOTE_BACKGROUND` by `for_pool`).
    pub max_background: u16,
    /// Bounds on transactions begun through the mount's ioctls
    /// (`txn_bytes=SIZE` per transaction, `txn_bytes_per_user=SIZE`,
    /// `txn_bytes_total=SIZE`, `txn_open_per_user=N`, `txn_open=N`,
    /// `txn_lock_wait=SECS`; docs/SECURITY.md).
    pub txn_limits: hurricane::fs::TxnLimits,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            allow_other: false,
            allow_root: false,
            kernel_permissions: false,
            read_only: false,
            auto_unmount: false,
            atime: Atime::Relative,
            nodiratime: false,
            flags: Vec::new(),
            fsname: None,
            subtype: "hurricane".into(),
            threads: None,
            // The mount owns the pool and every change passes through the kernel,
            // so cached names and attributes cannot go stale behind its back.
            attr_timeout: Duration::from_secs(60),
            log: None,
            commit_interval: None,
            lease: None,
            cache_bytes: None,
            inode_cache: None,
            entry_cache: None,
            meta_cache_bytes: None,
            uring: true,
            uring_chosen: false,
            writeback_cache: false,
            max_background: LOCAL_BACKGROUND,
            txn_limits: hurricane::fs::TxnLimits::default(),
        }
    }
}

/// Options mount(8) adds or that only concern fstab processing: accepted
/// and ignored.
fn ignored(key: &str) -> bool {
    matches!(
        key,
        "defaults"
            | "auto"
            | "noauto"
            | "user"
            | "users"
            | "nouser"
            | "owner"
            | "group"
            | "nofail"
            | "_netdev"
            | "lazytime"
            | "nolazytime"
            | "comment"
            | "helper"
    ) || key.starts_with("x-")
}

fn parse_secs(key: &str, v: &str) -> Result<Duration, String> {
    let s: f64 = v.parse().map_err(|_| format!("mount option {key}={v}: not a number of seconds"))?;
    if !(0.0..=86400.0).contains(&s) {
        return Err(format!("mount option {key}={v}: out of range (0 to 86400 seconds)"));
    }
    Ok(Duration::from_secs_f64(s))
}

/// A byte count with an optional K, M, G or T suffix (powers of 1024).
fn parse_size(key: &str, v: &str) -> Result<u64, String> {
    hurricane::units::parse_size(v).map_err(|e| format!("mount option {key}={v}: {e}"))
}

impl MountOptions {
    /// Parses option lists such as `["allow_other,ro", "threads=8"]`.
    pub fn parse<S: AsRef<str>>(lists: &[S]) -> Result<MountOptions, String> {
        let mut o = MountOptions::default();
        let mut engine_only = false;
        for list in lists {
            for item in list.as_ref().split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (key, val) = match item.split_once('=') {
                    Some((k, v)) => (k, Some(v)),
                    None => (item, None),
                };
                let need = || {
                    val.filter(|v| !v.is_empty()).ok_or_else(|| format!("mount option {key} needs a value ({key}=...)"))
                };
                let flag = |f: MountOption| -> Result<MountOption, String> {
                    if val.is_some() {
                        return Err(format!("mount option {key} takes no value"));
                    }
                    Ok(f)
                };
                match key {
                    "allow_other" => o.allow_other = true,
                    "allow_root" => o.allow_root = true,
                    "default_permissions" => {
                        o.kernel_permissions = true;
                        engine_only = false;
                    }
                    // The default without allow_other: the engine alone checks.
                    "engine_permissions" => {
                        o.kernel_permissions = false;
                        engine_only = true;
                    }
                    "ro" => o.read_only = true,
                    "rw" => o.read_only = false,
                    "auto_unmount" => o.auto_unmount = true,
                    "dev" => o.flags.push(flag(MountOption::Dev)?),
                    "nodev" => o.flags.push(flag(MountOption::NoDev)?),
                    "suid" => o.flags.push(flag(MountOption::Suid)?),
                    "nosuid" => o.flags.push(flag(MountOption::NoSuid)?),
                    "exec" => o.flags.push(flag(MountOption::Exec)?),
                    "noexec" => o.flags.push(flag(MountOption::NoExec)?),
                    // (The kernel's flag shows in /proc/mounts; the mount
                    // keeps the times.)
                    "atime" | "relatime" => {
                        o.flags.push(flag(MountOption::Atime)?);
                        o.atime = Atime::Relative;
                    }
                    "noatime" => {
                        o.flags.push(flag(MountOption::NoAtime)?);
                        o.atime = Atime::Never;
                    }
                    "strictatime" => {
                        o.flags.push(flag(MountOption::Atime)?);
                        o.atime = Atime::Strict;
                    }
                    "nodiratime" if val.is_none() => o.nodiratime = true,
                    "diratime" if val.is_none() => o.nodiratime = false,
                    "sync" => o.flags.push(flag(MountOption::Sync)?),
                    "async" => o.flags.push(flag(MountOption::Async)?),
                    "dirsync" => o.flags.push(flag(MountOption::DirSync)?),
                    "fsname" => o.fsname = Some(need()?.to_string()),
                    "subtype" => o.subtype = need()?.to_string(),
                    "threads" => {
                        let v = need()?;
                        let n: usize = v.parse().map_err(|_| format!("mount option threads={v}: not a number"))?;
                        if !(1..=256).contains(&n) {
                            return Err(format!("mount option threads={v}: must be between 1 and 256"));
                        }
                        o.threads = Some(n);
                    }
                    "attr_timeout" | "entry_timeout" => o.attr_timeout = parse_secs(key, need()?)?,
                    "commit_interval" => {
                        let d = parse_secs(key, need()?)?;
                        if d.is_zero() {
                            return Err("mount option commit_interval must be above 0".into());
                        }
                        o.commit_interval = Some(d);
                    }
                    "lease" => {
                        let d = parse_secs(key, need()?)?;
                        if d < hurricane::device::MIN_LEASE_DURATION {
                            return Err(format!(
                                "mount option lease: at least {} s (it is renewed every third of it)",
                                hurricane::device::MIN_LEASE_DURATION.as_secs()
                            ));
                        }
                        o.lease = Some(d);
                    }
                    "cache" => o.cache_bytes = Some(parse_size(key, need()?)?),
                    "inode_cache" => {
                        let v = need()?;
                        let n: usize = v.parse().map_err(|_| format!("mount option inode_cache={v}: not a number"))?;
                        if n < 64 {
                            return Err(format!("mount option inode_cache={v}: at least 64 inodes"));
                        }
                        o.inode_cache = Some(n);
                    }
                    "entry_cache" => {
                        let v = need()?;
                        let n: usize = v.parse().map_err(|_| format!("mount option entry_cache={v}: not a number"))?;
                        o.entry_cache = Some(n);
                    }
                    "meta_cache" => {
                        let b = parse_size(key, need()?)?;
                        if b < 1 << 20 {
                            return Err("mount option meta_cache: at least 1M".into());
                        }
                        o.meta_cache_bytes = Some(b);
                    }
                    "uring" if val.is_none() => (o.uring, o.uring_chosen) = (true, true),
                    "nouring" if val.is_none() => (o.uring, o.uring_chosen) = (false, true),
                    "writeback_cache" if val.is_none() => o.writeback_cache = true,
                    "nowriteback_cache" if val.is_none() => o.writeback_cache = false,
                    "log" => o.log = Some(PathBuf::from(need()?)),
                    "txn_bytes" | "txn_bytes_per_user" | "txn_bytes_total" => {
                        let b = parse_size(key, need()?)?;
                        if b < 4096 {
                            return Err(format!("mount option {key}: at least 4K"));
                        }
                        let l = &mut o.txn_limits;
                        *match key {
                            "txn_bytes" => &mut l.bytes,
                            "txn_bytes_per_user" => &mut l.user_bytes,
                            _ => &mut l.pool_bytes,
                        } = b;
                    }
                    "txn_open" | "txn_open_per_user" => {
                        let v = need()?;
                        let n: usize = v.parse().map_err(|_| format!("mount option {key}={v}: not a number"))?;
                        if n == 0 {
                            return Err(format!("mount option {key}: at least 1"));
                        }
                        *if key == "txn_open" { &mut o.txn_limits.pool_open } else { &mut o.txn_limits.user_open } = n;
                    }
                    "txn_lock_wait" => {
                        let d = parse_secs(key, need()?)?;
                        if d.is_zero() || d > Duration::from_secs(3600) {
                            return Err("mount option txn_lock_wait: above 0 and at most 3600 s".into());
                        }
                        o.txn_limits.lock_wait = d;
                    }
                    k if ignored(k) => {}
                    _ => return Err(format!("unknown mount option {item:?}")),
                }
            }
        }
        // Later flags win over earlier contrary ones (fstab "defaults,noexec").
        let mut seen: Vec<MountOption> = Vec::new();
        for f in o.flags.iter().rev() {
            let clash = |a: &MountOption, b: &MountOption| {
                use MountOption::*;
                matches!(
                    (a, b),
                    (Dev, NoDev)
                        | (NoDev, Dev)
                        | (Suid, NoSuid)
                        | (NoSuid, Suid)
                        | (Exec, NoExec)
                        | (NoExec, Exec)
                        | (Atime, NoAtime)
                        | (NoAtime, Atime)
                        | (Sync, Async)
                        | (Async, Sync)
                )
            };
            if !seen.iter().any(|s| s == f || clash(s, f)) {
                seen.push(f.clone());
            }
        }
        seen.reverse();
        o.flags = seen;
        // A bound for one user or one transaction is at most the pool's.
        let l = &mut o.txn_limits;
        l.user_open = l.user_open.min(l.pool_open);
        l.user_bytes = l.user_bytes.min(l.pool_bytes);
        l.bytes = l.bytes.min(l.user_bytes);
        if o.auto_unmount && !(o.allow_other || o.allow_root) {
            return Err("auto_unmount needs allow_other or allow_root".into());
        }
        if o.allow_other {
            // Opens of FIFOs and device nodes are served by the kernel and
            // never reach the engine: without default_permissions another
            // user could open any of them, whatever their mode.
            if engine_only {
                return Err("engine_permissions cannot be combined with allow_other: the kernel must check \
                            opens of FIFOs and device nodes, which never reach the engine"
                    .into());
            }
            o.kernel_permissions = true;
        }
        Ok(o)
    }

    /// Which names the kernel may keep.
    pub fn name_cache(&self) -> NameCache {
        let root = rustix::process::geteuid().is_root();
        if self.kernel_permissions || (root && !self.allow_other) {
            // Without allow_other, the kernel lets only processes of the
            // mounting user and group (here uid and gid 0) use the mount,
            // and the engine lets uid 0 search every directory: a kept
            // name can let nobody through a directory they may not search.
            NameCache::All
        } else {
            NameCache::Searchable
        }
    }

    /// The options for a pool whose devices include some over the network
    /// (`remote`: devices in a Ceph cluster) where the command line left
    /// the choice open. Every request to such a device waits for a round
    /// trip, so the mount serves many at once: /dev/fuse threads, at least
    /// `REMOTE_THREADS` of them, rather than one io_uring queue per CPU,
    /// whose thread serves one request at a time.
    pub fn for_pool(mut self, remote: bool) -> MountOptions {
        if remote {
            self.max_background = self.max_background.max(REMOTE_BACKGROUND);
            if !self.uring_chosen {
                self.uring = false;
            }
            if self.threads.is_none() && !self.uring {
                self.threads = Some(self.thread_count().max(REMOTE_THREADS));
            }
        }
        self
    }

    pub fn thread_count(&self) -> usize {
        self.threads.unwrap_or_else(|| hurricane::affinity::cpus().clamp(4, 32))
    }

    /// The fuser session configuration for a pool at `pool_name`.
    pub fn fuser_config(&self, pool_name: &str) -> Config {
        let mut mo = vec![
            MountOption::FSName(self.fsname.clone().unwrap_or_else(|| pool_name.to_string())),
            MountOption::Subtype(self.subtype.clone()),
        ];
        if self.kernel_permissions {
            mo.push(MountOption::DefaultPermissions);
        }
        if self.auto_unmount {
            mo.push(MountOption::AutoUnmount);
        }
        mo.push(if self.read_only { MountOption::RO } else { MountOption::RW });
        mo.extend(self.flags.iter().cloned());
        let mut c = Config::default();
        c.mount_options = mo;
        c.acl = if self.allow_other {
            SessionACL::All
        } else if self.allow_root {
            SessionACL::RootAndOwner
        } else {
            SessionACL::Owner
        };
        c.n_threads = Some(self.thread_count());
        c.clone_fd = true;
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists() {
        let o = MountOptions::parse(&[
            "allow_other,ro",
            "default_permissions,threads=3",
            "noexec,exec,x-systemd.automount,defaults",
        ])
        .unwrap();
        assert!(o.allow_other && o.read_only && o.kernel_permissions);
        assert_eq!(o.name_cache(), NameCache::All);
        assert_eq!(o.threads, Some(3));
        assert_eq!(o.flags, vec![MountOption::Exec]);
        let c = o.fuser_config("/pool");
        assert_eq!(c.acl, SessionACL::All);
        assert!(c.mount_options.contains(&MountOption::RO));
        assert!(c.mount_options.contains(&MountOption::FSName("/pool".into())));
        assert_eq!(c.n_threads, Some(3));
        assert!(c.mount_options.contains(&MountOption::DefaultPermissions));
        // Other users: the kernel checks too (FIFO and device opens never
        // reach the engine), and cannot be talked out of it.
        let a = MountOptions::parse(&["allow_other"]).unwrap();
        assert!(a.kernel_permissions);
        assert!(a.fuser_config("/p").mount_options.contains(&MountOption::DefaultPermissions));
        assert_eq!(a.name_cache(), NameCache::All);
        let e = MountOptions::parse(&["engine_permissions,allow_other"]).unwrap_err();
        assert!(e.contains("engine_permissions"), "{e}");
        assert!(MountOptions::parse(&["engine_permissions", "default_permissions,allow_other"]).is_ok());
        let root = rustix::process::geteuid().is_root();
        let own = MountOptions::parse(&["engine_permissions"]).unwrap();
        assert_eq!(own.name_cache(), if root { NameCache::All } else { NameCache::Searchable });
        let d = MountOptions::parse::<&str>(&[]).unwrap();
        assert!(!d.fuser_config("/p").mount_options.contains(&MountOption::DefaultPermissions));
    }

    #[test]
    fn rejects_bad_options() {
        assert!(MountOptions::parse(&["bogus"]).unwrap_err().contains("bogus"));
        assert!(MountOptions::parse(&["threads=0"]).is_err());
        assert!(MountOptions::parse(&["threads="]).is_err());
        assert!(MountOptions::parse(&["attr_timeout=-1"]).is_err());
        assert!(MountOptions::parse(&["auto_unmount"]).is_err());
        assert!(MountOptions::parse(&["noexec=1"]).is_err());
        assert!(MountOptions::parse::<&str>(&[]).is_ok());
        assert_eq!(MountOptions::parse(&["cache=64M"]).unwrap().cache_bytes, Some(64 << 20));
        assert_eq!(MountOptions::parse(&["cache=0"]).unwrap().cache_bytes, Some(0));
        let o = MountOptions::parse(&["inode_cache=100000,meta_cache=256M,entry_cache=0"]).unwrap();
        assert_eq!((o.inode_cache, o.meta_cache_bytes, o.entry_cache), (Some(100_000), Some(256 << 20), Some(0)));
        assert!(MountOptions::parse(&["entry_cache=lots"]).unwrap_err().contains("entry_cache=lots: not a number"));
        for bad in ["inode_cache=10", "inode_cache=x", "meta_cache=4K", "inode_cache"] {
            assert!(MountOptions::parse(&[bad]).is_err(), "{bad}");
        }
        assert!(MountOptions::parse(&["cache=lots"]).is_err());
        // Access times: relatime unless told, the last word wins.
        assert_eq!(MountOptions::parse::<&str>(&[]).unwrap().atime, Atime::Relative);
        let o = MountOptions::parse(&["noatime,nodiratime"]).unwrap();
        assert!(o.atime == Atime::Never && o.nodiratime && o.flags == vec![MountOption::NoAtime]);
        let o = MountOptions::parse(&["noatime", "strictatime"]).unwrap();
        assert!(o.atime == Atime::Strict && !o.nodiratime && o.flags == vec![MountOption::Atime]);
        assert_eq!(MountOptions::parse(&["strictatime,relatime"]).unwrap().atime, Atime::Relative);
        assert!(MountOptions::parse(&["strictatime=1"]).is_err());
        assert!(MountOptions::parse::<&str>(&[]).unwrap().uring);
        assert!(!MountOptions::parse(&["nouring"]).unwrap().uring);
        assert!(!MountOptions::parse::<&str>(&[]).unwrap().writeback_cache);
        assert!(MountOptions::parse(&["writeback_cache"]).unwrap().writeback_cache);
        assert!(!MountOptions::parse(&["writeback_cache,nowriteback_cache"]).unwrap().writeback_cache);
        assert!(MountOptions::parse(&["writeback_cache=1"]).is_err());
        assert!(MountOptions::parse(&["uring=1"]).is_err());
        assert!(MountOptions::parse(&["cache=99999999999T"]).is_err());
        assert_eq!(MountOptions::parse(&["lease=3"]).unwrap().lease, Some(Duration::from_secs(3)));
        // A pool with devices over the network: many /dev/fuse threads,
        // unless the command line chose.
        let o = MountOptions::parse::<&str>(&[]).unwrap().for_pool(true);
        assert!(!o.uring && o.thread_count() >= REMOTE_THREADS && o.max_background == REMOTE_BACKGROUND);
        let o = MountOptions::parse::<&str>(&[]).unwrap().for_pool(false);
        assert!(o.uring && o.threads.is_none());
        let o = MountOptions::parse(&["uring"]).unwrap().for_pool(true);
        assert!(o.uring && o.threads.is_none());
        let o = MountOptions::parse(&["nouring,threads=5"]).unwrap().for_pool(true);
        assert!(!o.uring && o.thread_count() == 5);
        assert_eq!(MountOptions::parse::<&str>(&[]).unwrap().lease, None);
        let t = MountOptions::parse(&["txn_bytes=1M,txn_bytes_per_user=2M,txn_bytes_total=8M,txn_open=10"])
            .unwrap()
            .txn_limits;
        assert_eq!((t.bytes, t.user_bytes, t.pool_bytes, t.pool_open), (1 << 20, 2 << 20, 8 << 20, 10));
        let t = MountOptions::parse(&["txn_open_per_user=3,txn_lock_wait=2"]).unwrap().txn_limits;
        assert_eq!((t.user_open, t.lock_wait), (3, Duration::from_secs(2)));
        let t = MountOptions::parse(&["txn_open=2,txn_bytes_total=1M"]).unwrap().txn_limits;
        assert_eq!((t.user_open, t.user_bytes, t.bytes), (2, 1 << 20, 1 << 20));
        for bad in ["txn_bytes=1", "txn_open=0", "txn_lock_wait=0", "txn_open=x", "txn_lock_wait=4000"] {
            assert!(MountOptions::parse(&[bad]).is_err(), "{bad}");
        }
        for bad in ["lease=0.5", "lease=x", "lease"] {
            assert!(MountOptions::parse(&[bad]).is_err(), "{bad}");
        }
    }
}
