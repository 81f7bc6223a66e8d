//! Remounts: the kernel changes a FUSE mount's flags (`mount -o
//! remount,ro`) without a word to its server. The server watches its own
//! mount in /proc/self/mountinfo, which wakes a poller on every change of
//! the mount table, and stops writing the pool when the file system turns
//! read-only ([`hurricane::Fs::set_writable`]: a checkpoint, then every
//! change refused with EROFS), and resumes when it turns read-write. The
//! mount helper waits for the server's statistics to show the new state
//! (`StatsReport::writable`) before it returns.

use crate::mountinfo::parse_mountinfo;
use hurricane::Fs;
use std::io::{Read, Seek};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the watcher looks at its stop flag while the table is quiet
/// (the server waits that long at most for it when the session ends).
const POLL: Duration = Duration::from_millis(100);

/// Whether the FUSE file system of connection `minor` is read-only now,
/// per `/proc/self/mountinfo` (None: not mounted in this namespace).
fn read_only_now(text: &str, minor: u32) -> Option<bool> {
    parse_mountinfo(text)
        .into_iter()
        .find(|m| m.is_fuse() && m.major == 0 && m.minor == minor)
        .map(|m| m.is_read_only())
}

/// Follows the read-only flag of the mount of connection `minor` (its
/// device number's minor) until `stop` is set, switching `fs` to match.
pub fn watch(fs: Fs, minor: u32, stop: Arc<AtomicBool>) -> std::io::Result<std::thread::JoinHandle<()>> {
    let mut f = std::fs::File::open("/proc/self/mountinfo")?;
    std::thread::Builder::new().name("hurricane-remount".into()).spawn(move || {
        let mut text = String::new();
        let mut changed = true;
        while !stop.load(Ordering::Acquire) {
            if changed {
                text.clear();
                if f.rewind().and_then(|_| f.read_to_string(&mut text)).is_err() {
                    return;
                }
                follow(&fs, read_only_now(&text, minor));
            }
            // The kernel wakes readers of mountinfo with POLLPRI (and
            // POLLERR) when the mount table changes.
            let mut fds = [rustix::event::PollFd::new(&f, rustix::event::PollFlags::PRI)];
            let timeout = rustix::event::Timespec::try_from(POLL).ok();
            changed = match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(n) => n > 0,
                Err(rustix::io::Errno::INTR) => false,
                Err(e) => {
                    tracing::warn!("watching the mount table: {e}; remounts are not followed");
                    return;
                }
            };
        }
    })
}

/// Switches `fs` to the mount's state (`ro`; None: not mounted here).
fn follow(fs: &Fs, ro: Option<bool>) {
    let Some(ro) = ro else { return };
    if ro != fs.is_writable() {
        return;
    }
    let what = if ro { "read-only" } else { "read-write" };
    match fs.set_writable(!ro) {
        Ok(()) => tracing::info!("remounted {what}"),
        Err(e) => tracing::error!("remount {what}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_flag_of_its_own_connection() {
        let text = "95 22 0:52 / /a rw,nosuid - fuse.hurricane /p rw,user_id=0\n\
                    96 22 0:53 / /b ro,nosuid - fuse.hurricane /q ro,user_id=0\n\
                    97 22 8:1 / /c ro - ext4 /dev/sda1 ro\n";
        assert_eq!(read_only_now(text, 52), Some(false));
        assert_eq!(read_only_now(text, 53), Some(true));
        assert_eq!(read_only_now(text, 1), None);
        assert_eq!(read_only_now(text, 54), None);
    }
}
