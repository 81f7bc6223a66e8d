//! Which names the kernel may keep: the policy, and the notification that
//! makes the kernel revalidate every name it holds.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// `FUSE_NOTIFY_INC_EPOCH` (protocol 7.44, Linux 6.16).
const NOTIFY_INC_EPOCH: i32 = 8;

/// Which names (dentries) the kernel may keep, and so answer path steps
/// with, without asking the engine.
///
/// With `default_permissions` the kernel checks every step against the
/// attributes it holds, which it must refresh after each change of a
/// directory: one more round trip for every create or unlink. Without it
/// the engine checks each request, and a name the kernel keeps must not
/// let anyone through a directory they may not search. So names are kept
/// only in directories that every user may search (all three x bits); a
/// change that would leave a kept name where that no longer holds (chmod
/// of such a directory, a rename out of one into another) first makes
/// the kernel revalidate every name it holds (FUSE_NOTIFY_INC_EPOCH), so
/// the next step through it reaches the engine's check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum NameCache {
    /// The kernel checks permissions too: any name may be kept.
    All = 0,
    /// The engine checks: names in directories every user may search.
    Searchable = 1,
    /// The engine checks and the kernel cannot be made to revalidate
    /// names: none are kept, every step reaches the engine.
    Nothing = 2,
}

/// Whether every user may search a directory of this mode.
pub(crate) fn searchable(mode: u32) -> bool {
    mode & 0o111 == 0o111
}

/// Sends FUSE_NOTIFY_INC_EPOCH: every name the kernel holds is revalidated
/// (looked up again) at its next use.
fn inc_epoch(dev: &OwnedFd) -> std::io::Result<()> {
    // struct fuse_out_header { u32 len; i32 error (the notify code); u64 unique (0) }
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&16u32.to_ne_bytes());
    h[4..8].copy_from_slice(&NOTIFY_INC_EPOCH.to_ne_bytes());
    match rustix::io::write(dev, &h)? {
        16 => Ok(()),
        n => Err(std::io::Error::other(format!("short write of {n} bytes"))),
    }
}

/// The name rule in force: it starts as `Nothing` where the engine's rule
/// was asked for, until the kernel has shown it revalidates names on
/// demand, and falls back to `Nothing` if it ever stops doing so.
pub(crate) struct Names {
    current: AtomicU8,
    /// /dev/fuse, for notifications, once the kernel accepted one.
    notify: OnceLock<OwnedFd>,
    wanted: NameCache,
}

impl Names {
    pub fn new(wanted: NameCache) -> Names {
        let start = match wanted {
            NameCache::Searchable => NameCache::Nothing,
            n => n,
        };
        Names { current: AtomicU8::new(start as u8), notify: OnceLock::new(), wanted }
    }

    pub fn get(&self) -> NameCache {
        match self.current.load(Ordering::Acquire) {
            0 => NameCache::All,
            1 => NameCache::Searchable,
            _ => NameCache::Nothing,
        }
    }

    /// Takes the mount's /dev/fuse descriptor for notifications and, where
    /// the mount leaves names to the engine's rule, checks that the kernel
    /// revalidates names on demand before any name is kept.
    pub fn start(&self, dev: OwnedFd) {
        if self.wanted != NameCache::Searchable {
            return;
        }
        match inc_epoch(&dev) {
            Ok(()) => {
                let _ = self.notify.set(dev);
                self.current.store(NameCache::Searchable as u8, Ordering::Release);
            }
            Err(e) => tracing::info!(
                "the kernel cannot revalidate names on demand (FUSE_NOTIFY_INC_EPOCH, Linux 6.16+: {e}); \
                 names are not cached, every path step reaches the engine"
            ),
        }
    }

    /// How long the kernel may keep a name in a directory, given the
    /// directory's mode (read only where the rule needs it).
    pub fn ttl(&self, ttl: Duration, dir_mode: impl FnOnce() -> Option<u32>) -> Duration {
        match self.get() {
            NameCache::All => ttl,
            NameCache::Nothing => Duration::ZERO,
            NameCache::Searchable => match dir_mode() {
                Some(m) if searchable(m) => ttl,
                _ => Duration::ZERO,
            },
        }
    }

    /// Called before replying to a change that may leave a kept name in a
    /// directory not every user may search: the kernel revalidates every
    /// name at its next use, so the engine checks the next step through it.
    pub fn expire(&self) {
        if self.get() != NameCache::Searchable {
            return;
        }
        let r = match self.notify.get() {
            Some(dev) => inc_epoch(dev),
            None => Err(std::io::Error::other("no notification channel")),
        };
        if let Err(e) = r {
            // Keep no more names from now on; the engine still checks
            // every request that reaches it.
            tracing::error!("cannot make the kernel revalidate names: {e}; names are no longer cached");
            self.current.store(NameCache::Nothing as u8, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        let t = Duration::from_secs(60);
        assert_eq!(Names::new(NameCache::All).ttl(t, || None), t);
        assert_eq!(Names::new(NameCache::Nothing).ttl(t, || Some(0o777)), Duration::ZERO);
        // The engine's rule starts as Nothing until the kernel shows it
        // can revalidate names.
        let n = Names::new(NameCache::Searchable);
        assert_eq!(n.get(), NameCache::Nothing);
        n.current.store(NameCache::Searchable as u8, Ordering::Release);
        assert_eq!(n.ttl(t, || Some(0o755)), t);
        assert_eq!(n.ttl(t, || Some(0o750)), Duration::ZERO);
        assert_eq!(n.ttl(t, || None), Duration::ZERO);
        // No channel to expire names with: none are kept from then on.
        n.expire();
        assert_eq!(n.get(), NameCache::Nothing);
    }
}
