//! The pool's status served as `user.hurricane.status` on a mount's root:
//! each device's state, and every file's health, which takes a walk of the
//! whole pool (O(files)). Any user may read it, so it is served off the
//! serving threads (`filesystem::getxattr`) and the walk is shared:
//!
//! - one walk at a time: a reader that finds one under way waits for it
//!   (on its helper thread) and takes its result;
//! - a user other than root is given the last walk's health while it is
//!   younger than `REUSE_MIN`, or twenty times what the walk took, and no
//!   device changed state or counted an error since: a user looping on the
//!   attribute costs at most one walk in twenty of the pool's time;
//! - root is given a fresh walk, and the paths of lost and degraded files
//!   and of the files on the permanent error list (other users get the
//!   counts only: the paths name files in directories they may not be
//!   allowed to read).
//!
//! The devices' part is made afresh for every reader.

use crate::report::{DeviceReport, StatusReport, LISTED_PATHS};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The shortest time a walk's result is given to users other than root.
const REUSE_MIN: Duration = Duration::from_secs(2);
/// How many times its own duration a walk's result is kept for them.
const REUSE_FACTOR: u32 = 20;

/// The last walk of a mount's pool.
#[derive(Default)]
pub struct StatusCache {
    /// Held while a walk runs (one at a time).
    last: Mutex<Option<Walk>>,
    /// Walks made since the mount.
    walks: AtomicU64,
}

struct Walk {
    at: Instant,
    took: Duration,
    /// The devices' states and error counts when it was made.
    devices: Vec<(String, u64, u64, u64)>,
    report: StatusReport,
}

fn device_key(d: &[DeviceReport]) -> Vec<(String, u64, u64, u64)> {
    d.iter().map(|d| (d.state.clone(), d.read_errors, d.write_errors, d.checksum_errors)).collect()
}

impl StatusCache {
    /// The status for a reader with `uid`. May walk the pool: call it off
    /// the serving threads.
    pub fn report(&self, fs: &hurricane::Fs, pool: &str, mountpoint: &str, uid: u32) -> StatusReport {
        let devices = crate::report::device_reports(fs);
        let key = device_key(&devices);
        let mut last = self.last.lock();
        let reusable = last
            .as_ref()
            .is_some_and(|w| uid != 0 && w.devices == key && w.at.elapsed() < REUSE_MIN.max(w.took * REUSE_FACTOR));
        if !reusable {
            self.walks.fetch_add(1, Ordering::Relaxed);
            let t0 = Instant::now();
            let report =
                StatusReport { mountpoint: mountpoint.to_string(), ..StatusReport::listing(fs, pool, LISTED_PATHS) };
            *last = Some(Walk { at: Instant::now(), took: t0.elapsed(), devices: key, report });
        }
        let mut r = last.as_ref().map(|w| w.report.clone()).unwrap_or_default();
        drop(last);
        r.devices = devices;
        if uid != 0 {
            r.health.lost_paths.clear();
            r.health.degraded_paths.clear();
            for e in &mut r.health.errors {
                e.paths.clear();
            }
        }
        r
    }

    /// Walks of the pool made since the mount.
    pub fn walks(&self) -> u64 {
        self.walks.load(Ordering::Relaxed)
    }
}
