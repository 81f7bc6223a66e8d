//! Conversions between the engine's values and the kernel's: errors to
//! errno values, nanosecond times to and from `SystemTime`, attributes,
//! and the caller's credentials.

use fuser::{Errno, FileAttr, FileType, INodeNo, TimeOrNow};
use hurricane::Attr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) fn errno(e: hurricane::Error) -> Errno {
    let n = e.errno();
    if n == libc::EIO {
        tracing::warn!("I/O error: {e}");
    } else if n == libc::ENOSPC {
        // Said in the log too: which device refused, and why (a RADOS pool
        // over its quota names the object and the quota).
        tracing::warn!("{e}");
    }
    Errno::from_i32(n)
}

pub(crate) fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_nanos(ns.unsigned_abs())).unwrap_or(UNIX_EPOCH)
    }
}

/// Nanoseconds since 1970 of a time fuser decoded from a request.
/// fuser 0.18 decodes a time before 1970, (secs < 0, nsec), as 1970 minus
/// (|secs| s + nsec ns) rather than minus |secs| s plus nsec ns; this
/// undoes that, so `touch -d 1969-...` keeps its nanoseconds right.
pub(crate) fn nanos(t: SystemTime) -> i64 {
    let v = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_secs() as i128) * 1_000_000_000 + e.duration().subsec_nanos() as i128,
    };
    v.clamp(i64::MIN as i128, i64::MAX as i128) as i64
}

pub(crate) fn kind(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub(crate) fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.btime),
        kind: kind(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

/// Whether a time the kernel sent is its clock's "now" (within 2 s of ours).
pub(crate) fn near_now(t: SystemTime) -> bool {
    let now = SystemTime::now();
    let d = now.duration_since(t).unwrap_or_else(|e| e.duration());
    d <= Duration::from_secs(2)
}

pub(crate) fn when(t: Option<TimeOrNow>) -> Option<Option<i64>> {
    t.map(|t| match t {
        TimeOrNow::Now => None,
        TimeOrNow::SpecificTime(s) => Some(nanos(s)),
    })
}

/// Supplementary groups of the calling thread, from /proc.
pub(crate) fn groups_of(pid: u32) -> Vec<u32> {
    if pid == 0 {
        return Vec::new();
    }
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { return Vec::new() };
    s.lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| g.split_whitespace().filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_now_is_recognised() {
        let now = SystemTime::now();
        assert!(near_now(now));
        assert!(near_now(now - Duration::from_millis(1500)));
        assert!(near_now(now + Duration::from_millis(500)), "a clock a little ahead");
        assert!(!near_now(now - Duration::from_secs(30)), "a flush of old writes, or a chosen time");
        assert!(!near_now(now + Duration::from_secs(3600)));
        assert!(!near_now(UNIX_EPOCH));
    }

    #[test]
    fn times_round_trip() {
        for ns in [0i64, 1, 1_500_000_000_123, -1, -86_400_000_000_000, i64::MAX] {
            let t = time(ns);
            let d = t
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as i128)
                .unwrap_or_else(|e| -(e.duration().as_nanos() as i128));
            assert_eq!(d, ns as i128);
        }
        // What fuser 0.18 hands over for (secs = -2, nsec = 5): 1970 - 2.000000005 s.
        let from_fuser = UNIX_EPOCH - Duration::new(2, 5);
        assert_eq!(nanos(from_fuser), -2_000_000_000 + 5);
        assert_eq!(nanos(UNIX_EPOCH + Duration::new(3, 7)), 3_000_000_007);
    }
}
