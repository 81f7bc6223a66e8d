//! Finding, unmounting and querying mounts: /proc/self/mountinfo parsing,
//! fusermount3 calls, and the statistics xattr.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    pub id: u64,
    pub major: u32,
    pub minor: u32,
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
    /// The mount's own options (`ro`/`rw`, `nosuid`, `noatime`, ...).
    pub options: String,
    /// The file system's options: the first, `ro` or `rw`, is the
    /// superblock's, which a remount changes for every mount of it.
    pub super_options: String,
}

impl MountEntry {
    pub fn is_fuse(&self) -> bool {
        self.fstype == "fuse" || self.fstype.starts_with("fuse.")
    }

    /// Whether the file system is read-only (the superblock's flag).
    pub fn is_read_only(&self) -> bool {
        self.super_options.split(',').next() == Some("ro")
    }
}

/// Undoes the octal escapes (\040 for a space) of mountinfo fields.
fn unescape(s: &str) -> OsString {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (b[i + 1] - b'0') as u32 * 64 + (b[i + 2] - b'0') as u32 * 8 + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    OsString::from_vec(out)
}

/// Parses mountinfo text; malformed lines are skipped.
pub fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let Some(sep) = f.iter().position(|x| *x == "-") else { continue };
        if f.len() < 5 || sep < 6 || f.len() < sep + 3 {
            continue;
        }
        let Ok(id) = f[0].parse() else { continue };
        let Some((maj, min)) = f[2].split_once(':') else { continue };
        let (Ok(major), Ok(minor)) = (maj.parse(), min.parse()) else { continue };
        out.push(MountEntry {
            id,
            major,
            minor,
            mount_point: PathBuf::from(unescape(f[4])),
            fstype: f[sep + 1].to_string(),
            source: unescape(f[sep + 2]).to_string_lossy().into_owned(),
            options: f[5].to_string(),
            super_options: f.get(sep + 3).copied().unwrap_or("").to_string(),
        });
    }
    out
}

pub fn mounts() -> Vec<MountEntry> {
    std::fs::read_to_string("/proc/self/mountinfo").map(|t| parse_mountinfo(&t)).unwrap_or_default()
}

/// FUSE mounts at `mnt` (an absolute path), oldest first.
pub fn fuse_mounts_at(mnt: &Path) -> Vec<MountEntry> {
    mounts().into_iter().filter(|m| m.is_fuse() && m.mount_point == mnt).collect()
}

/// The ids of the FUSE mounts at `mnt` now, for [`serves_since`].
pub fn mount_ids(mnt: &Path) -> Vec<u64> {
    fuse_mounts_at(mnt).iter().map(|m| m.id).collect()
}

/// Whether a FUSE mount at `mnt` that was not there when `before` was taken
/// ([`mount_ids`]) serves. In the mount table is not enough: its server may
/// still be in its handshake with the kernel, and an unmount then ends it
/// before it served anything. A request waits for the handshake, so once
/// one is answered the mount serves.
pub fn serves_since(mnt: &Path, before: &[u64]) -> bool {
    fuse_mounts_at(mnt).iter().any(|m| !before.contains(&m.id)) && std::fs::metadata(mnt).is_ok()
}

/// An absolute form of `p` that does not touch the file itself: a dead
/// FUSE mount point cannot be stat'ed, so canonicalize only its parent.
pub fn absolute(p: &Path) -> PathBuf {
    let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => parent.canonicalize().map(|d| d.join(name)).unwrap_or(abs),
        _ => abs,
    }
}

/// Reads an extended attribute of `path` whole (probing its size first).
pub fn get_xattr(path: &Path, name: &str) -> Result<Vec<u8>, std::io::Error> {
    let mut size = rustix::fs::getxattr_query(path, name)? + 1;
    for _ in 0..8 {
        let mut buf = vec![0u8; size];
        match rustix::fs::getxattr(path, name, &mut buf[..]) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            // It grew since the probe.
            Err(rustix::io::Errno::RANGE) => size = (size * 2).max(4096),
            Err(e) => return Err(e.into()),
        }
    }
    Err(std::io::Error::from_raw_os_error(libc::ERANGE))
}

/// The statistics of a mounted pool.
pub fn read_stats(mnt: &Path) -> Result<crate::StatsReport, String> {
    let raw = read_root_xattr(mnt, crate::STATS_XATTR)?;
    crate::StatsReport::from_json(&raw).map_err(|e| format!("{}: {e}", mnt.display()))
}

/// The status of a mounted pool: its devices and every file's health.
pub fn read_status(mnt: &Path) -> Result<crate::report::StatusReport, String> {
    let raw = read_root_xattr(mnt, crate::STATUS_XATTR)?;
    crate::report::StatusReport::from_json(&raw).map_err(|e| format!("{}: {e}", mnt.display()))
}

fn read_root_xattr(mnt: &Path, name: &str) -> Result<Vec<u8>, String> {
    get_xattr(mnt, name).map_err(|e| match e.raw_os_error() {
        Some(libc::ENODATA) | Some(libc::EOPNOTSUPP) => format!("{}: not the root of a Hurricane mount", mnt.display()),
        _ => format!("{}: reading {name}: {e}", mnt.display()),
    })
}

/// Whether process `pid` still runs: any of its threads (a zombie counts
/// as gone).
pub fn process_alive(pid: u32) -> bool {
    // The state follows the command name, which is in parentheses.
    let running = |stat: &str| stat.rsplit_once(')').is_some_and(|(_, r)| !r.trim_start().starts_with(['Z', 'X']));
    // Every thread counts: an exiting process's leader turns zombie before
    // its other threads are gone, and those still hold its open files (the
    // pool's lock among them).
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return false };
    tasks.flatten().any(|t| std::fs::read_to_string(t.path().join("stat")).is_ok_and(|s| running(&s)))
}

fn run(cmd: &str, args: &[&OsStr]) -> Result<(), String> {
    match Command::new(cmd).args(args).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("{cmd}: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Err(format!("{cmd}: {e}")),
    }
}

/// Why this process cannot mount FUSE file systems itself (it serves them
/// in-process with [`crate::serve`]), if it cannot: it must be root, with
/// /dev/fuse there.
pub fn cannot_mount_here() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    None
}

/// For tests that serve mounts in-process: whether they can run here. They
/// are skipped where this process cannot mount, saying why, except under
/// `CI`, where a missing FUSE must not pass silently: there this panics.
#[doc(hidden)]
pub fn tests_can_mount() -> bool {
    let Some(why) = cannot_mount_here() else { return true };
    let ci =
        std::env::var("CI").is_ok_and(|v| !matches!(v.trim().to_ascii_lowercase().as_str(), "" | "0" | "false" | "no"));
    assert!(!ci, "FUSE mounts are required under CI, but {why}");
    eprintln!("SKIPPED: cannot mount here: {why}");
    false
}

/// Unmounts the FUSE mount at `mnt`: `fusermount3 -u`, else `umount`
/// (`lazy`: detach now, finish when the last user leaves).
pub fn unmount(mnt: &Path, lazy: bool) -> Result<(), String> {
    let m = mnt.as_os_str();
    let mut errs = Vec::new();
    let fm: Vec<&OsStr> = if lazy { vec![OsStr::new("-u"), OsStr::new("-z"), m] } else { vec![OsStr::new("-u"), m] };
    for cmd in ["fusermount3", "fusermount"] {
        match run(cmd, &fm) {
            Ok(()) => return Ok(()),
            Err(e) => errs.push(e),
        }
    }
    let um: Vec<&OsStr> = if lazy { vec![OsStr::new("-l"), m] } else { vec![m] };
    match run("umount", &um) {
        Ok(()) => Ok(()),
        Err(e) => {
            errs.push(e);
            Err(errs.join("; "))
        }
    }
}

/// Unmounts `mnt` and waits (up to `timeout`) until the serving process
/// has exited, so the pool is closed and clean when this returns.
pub fn unmount_and_wait(mnt: &Path, timeout: Duration) -> Result<(), String> {
    let mnt = absolute(mnt);
    let before = fuse_mounts_at(&mnt);
    let Some(top) = before.last().cloned() else {
        return Err(format!("{}: no FUSE file system is mounted there", mnt.display()));
    };
    // The serving process names itself in the statistics (a dead mount
    // cannot answer: then there is nothing to wait for).
    let pid = read_stats(&mnt).ok().map(|r| r.pid);
    unmount(&mnt, false).map_err(|e| format!("{}: cannot unmount: {e}", mnt.display()))?;
    let deadline = Instant::now() + timeout;
    loop {
        let mounted = fuse_mounts_at(&mnt).iter().any(|m| m.id == top.id);
        let alive = pid.is_some_and(process_alive);
        if !mounted && !alive {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(match pid {
                Some(p) if alive => format!(
                    "{}: unmounted, but the server (pid {p}) is still flushing after {timeout:?}",
                    mnt.display()
                ),
                _ => format!("{}: still mounted after {timeout:?}", mnt.display()),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Takes `op` (an exclusive or a shared lock) on the pool directory open
/// as `f`. A lock held by the server of a mount that is gone is waited
/// for, up to `wait`: umount(8) unmounts a FUSE mount itself and returns
/// while the server still closes the pool (a checkpoint) and exits. Any
/// other holder (a mount, a command) is refused at once.
pub fn lock_pool_dir(
    f: &std::fs::File,
    pool: &Path,
    op: rustix::fs::FlockOperation,
    wait: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + wait;
    let name = pool.canonicalize().unwrap_or_else(|_| pool.to_path_buf());
    loop {
        match rustix::fs::flock(f, op) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::WOULDBLOCK) => {
                if let Some(m) = mounts().into_iter().find(|m| m.is_fuse() && Path::new(&m.source) == name) {
                    return Err(format!("the pool is in use: mounted on {}", m.mount_point.display()));
                }
                // (No holder listed: it let go meanwhile; try again.)
                let holders = lock_holders(f);
                if let Some(p) = holders.first().filter(|_| !holders.iter().any(|&pid| may_be_closing_server(pid))) {
                    return Err(format!("the pool is in use by another process (pid {p})"));
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "the pool is in use: its last mount's server is still closing it after {wait:?}"
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(format!("cannot lock the pool: {e}")),
        }
    }
}

/// The processes /proc/locks names as holding flock locks on the file
/// open as `f`.
fn lock_holders(f: &std::fs::File) -> Vec<u32> {
    let Ok(st) = rustix::fs::fstat(f) else { return Vec::new() };
    let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
    let Ok(text) = std::fs::read_to_string("/proc/locks") else { return Vec::new() };
    parse_lock_holders(&text, major, minor, st.st_ino)
}

/// The pids of FLOCK lines of /proc/locks for the file (device
/// `major`:`minor`, inode `ino`; the device in hex): `1: FLOCK ADVISORY
/// WRITE 1234 00:2a:5678 0 EOF`.
fn parse_lock_holders(text: &str, major: u32, minor: u32, ino: u64) -> Vec<u32> {
    let want = format!("{major:02x}:{minor:02x}:{ino}");
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // "->" marks a waiter, which holds nothing.
            if f.get(1) == Some(&"->") {
                return None;
            }
            (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&want.as_str())).then(|| f.get(4)?.parse().ok())?
        })
        .collect()
}

/// Whether process `pid` may be a server closing its pool: `hurricane
/// mount -f` (the background server of `hurricane mount`) by its command
/// line, or a process that is exiting (its memory, and with it its
/// command line, is gone before its files are closed).
fn may_be_closing_server(pid: u32) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return true };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    cmdline.is_empty()
        || (args.get(1) == Some(&&b"mount"[..]) && args.iter().any(|a| *a == b"-f" || *a == b"--foreground"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mountinfo_lines() {
        let text = "22 1 0:21 / /proc rw,nosuid shared:5 - proc proc rw\n\
                    95 22 0:52 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:50 - fuse.hurricane /pool\\040x rw,user_id=0,group_id=0\n\
                    garbage line\n\
                    96 22 0:53 / /mnt rw - fuse /p rw\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].mount_point, PathBuf::from("/tmp/a b"));
        assert_eq!(m[1].source, "/pool x");
        assert_eq!((m[1].major, m[1].minor), (0, 52));
        assert!(m[1].is_fuse() && m[2].is_fuse() && !m[0].is_fuse());
        assert_eq!(m[1].options, "rw,nosuid,nodev,relatime");
        assert_eq!(m[1].super_options, "rw,user_id=0,group_id=0");
        assert!(!m[1].is_read_only());
        let ro = parse_mountinfo("97 22 0:54 / /m ro,nosuid - fuse.hurricane /p ro,user_id=0\n");
        assert!(ro[0].is_read_only() && ro[0].options == "ro,nosuid");
    }

    #[test]
    fn finds_the_holders_of_a_lock() {
        let text = "1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF\n\
                    1: -> FLOCK  ADVISORY  WRITE 99 00:2a:5678 0 EOF\n\
                    2: POSIX  ADVISORY  WRITE 77 00:2a:5678 0 EOF\n\
                    3: FLOCK  ADVISORY  READ 4321 103:02:5678 0 EOF\n";
        assert_eq!(parse_lock_holders(text, 0, 0x2a, 5678), vec![1234]);
        assert_eq!(parse_lock_holders(text, 0x103, 2, 5678), vec![4321]);
        assert!(parse_lock_holders(text, 0, 0x2a, 5679).is_empty());
    }

    #[test]
    fn self_is_alive() {
        assert!(process_alive(std::process::id()));
        assert!(!process_alive(u32::MAX));
    }
}
