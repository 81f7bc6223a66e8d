//! Access times: when a read updates a file's or a directory's atime.
//!
//! Linux's `relatime` (its default) updates the access time on a read only
//! when it is not later than the last modification or change, or is more
//! than a day old: programs that ask whether a file was read since it was
//! written (mail readers, tmpwatch) still get their answer, and a file read
//! over and over costs one update a day. `strictatime` updates it on every
//! read. The caller decides when a read happened (the mount: a read or a
//! directory listing that reaches it) and which rule holds (its mount
//! options; `noatime` and `O_NOATIME` reads never call this).

use super::{now, Fs};
use crate::error::Result;
use crate::journal::{Ino, Op};
use crate::namespace::flags;

/// How old an access time `relatime` lets stand (a day, in nanoseconds).
const RELATIME_AGE: i64 = 24 * 3600 * 1_000_000_000;

/// Whether a read at `t` updates an access time under `relatime` (times
/// in nanoseconds).
pub fn relatime_due(atime: i64, mtime: i64, ctime: i64, t: i64) -> bool {
    atime <= mtime || atime <= ctime || t.saturating_sub(atime) >= RELATIME_AGE
}

impl Fs {
    /// Records a read of `ino` in its access time: on every read when
    /// `strict`, else by the `relatime` rule. Lazy like a write's times:
    /// applied now, journalled by the next commit. Returns whether it
    /// changed; a read-only pool keeps its times, and a file marked
    /// `noatime` (`chattr +A`) its access time.
    pub fn touch_atime(&self, ino: Ino, strict: bool) -> Result<bool> {
        if self.check_writable().is_err() {
            return Ok(false);
        }
        let t = now();
        let due = |atime: i64, mtime: i64, ctime: i64| strict || relatime_due(atime, mtime, ctime, t);
        {
            // A look without the locks first: most reads change nothing.
            let n = self.state().inode(ino)?;
            let d = n.data.read();
            if !due(d.atime, d.mtime, d.ctime) || flags::of(&d) & flags::NOATIME != 0 {
                return Ok(false);
            }
        }
        let g = self.inner.gate.enter();
        let mut l = self.state().lock(&[ino]);
        let d = l.get(ino)?;
        if !due(d.atime, d.mtime, d.ctime) || d.atime >= t {
            return Ok(false);
        }
        let (mtime, ctime) = (d.mtime, d.ctime);
        self.state().apply(&Op::Times { ino, atime: t, mtime, ctime }, &mut l)?;
        drop(l);
        drop(g);
        self.mark_dirty(ino);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn relatime_updates_after_a_change_or_a_day() {
        let t = 10 * RELATIME_AGE;
        // Read since the last write and change, less than a day ago: kept.
        assert!(!relatime_due(t - 10 * S, t - 20 * S, t - 20 * S, t));
        // Written (or changed) since the last read: updated.
        assert!(relatime_due(t - 10 * S, t - 5 * S, t - 20 * S, t));
        assert!(relatime_due(t - 10 * S, t - 20 * S, t - 5 * S, t));
        // The same instant counts as not later.
        assert!(relatime_due(t - 10 * S, t - 10 * S, t - 20 * S, t));
        // A day old: updated, however recent the writes.
        assert!(relatime_due(t - RELATIME_AGE, t - 2 * RELATIME_AGE, t - 2 * RELATIME_AGE, t));
        assert!(!relatime_due(t - RELATIME_AGE + S, t - 2 * RELATIME_AGE, t - 2 * RELATIME_AGE, t));
    }

    /// A read updates the access time when the rule says so, and only
    /// then; a read-only pool keeps it.
    #[test]
    fn reads_update_the_access_time_by_the_rule() {
        use crate::device::{Device, MemDevice};
        use crate::{FormatOptions, Options};
        use std::sync::Arc;
        let devs: Vec<Arc<dyn Device>> =
            (0..2).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), 64 << 20)) as Arc<dyn Device>).collect();
        Fs::format(devs.clone(), &FormatOptions::default()).unwrap();
        let fs = Fs::open(devs.clone(), Options { background_commit: false, ..Options::default() }).unwrap();
        fs.write_file("/f", b"data", None).unwrap();
        let ino = fs.resolve("/f").unwrap();
        // Written after its last read: the first read updates it.
        let a0 = fs.getattr(ino).unwrap();
        assert!(fs.touch_atime(ino, false).unwrap());
        let a1 = fs.getattr(ino).unwrap();
        assert!(a1.atime > a0.mtime && a1.atime > a0.ctime, "{a0:?} {a1:?}");
        assert_eq!((a1.mtime, a1.ctime), (a0.mtime, a0.ctime), "a read changes no other time");
        // Read again: relatime keeps it, strictatime moves it.
        assert!(!fs.touch_atime(ino, false).unwrap());
        assert_eq!(fs.getattr(ino).unwrap().atime, a1.atime);
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(fs.touch_atime(ino, true).unwrap());
        assert!(fs.getattr(ino).unwrap().atime > a1.atime);
        // A file marked noatime (chattr +A) keeps its access time.
        let root = crate::namespace::perm::Creds::root();
        fs.set_inode_flags(&root, ino, flags::NOATIME).unwrap();
        let kept = fs.getattr(ino).unwrap().atime;
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(!fs.touch_atime(ino, true).unwrap());
        assert_eq!(fs.getattr(ino).unwrap().atime, kept);
        fs.set_inode_flags(&root, ino, 0).unwrap();
        // The times persist across a commit and a reopen.
        assert!(fs.touch_atime(ino, true).unwrap());
        let a3 = fs.getattr(ino).unwrap();
        fs.close().unwrap();
        let ro = Fs::open(devs, Options { read_only: true, background_commit: false, ..Options::default() }).unwrap();
        assert_eq!(ro.getattr(ino).unwrap().atime, a3.atime, "the access time is journalled");
        assert!(!ro.touch_atime(ino, true).unwrap(), "a read-only pool keeps its times");
    }
}
