//! FUSE front end for a Hurricane pool: every program can use the pool
//! through an ordinary mount.
//!
//! - [`HurricaneFuse`] implements fuser's `Filesystem` over the engine.
//! - [`serve`] mounts a pool and serves it in the calling process until
//!   it is unmounted or gets SIGTERM/SIGINT (then flushes and unmounts).
//! - [`mountinfo`] finds mounts, unmounts them and reads their statistics,
//!   for the `hurricane mount|umount|stats` commands.
//!
//! Layouts are reachable through extended attributes:
//! `user.hurricane.layout` on a file, `user.hurricane.dir_layout` on a
//! directory; on the root, `user.hurricane.stats` gives the statistics and
//! `user.hurricane.status` the devices and every file's health.

mod coherence;
pub mod control;
mod convert;
mod dirs;
mod filesystem;
mod handles;
pub mod mountinfo;
mod names;
mod options;
pub mod remount;
pub mod report;
mod serve;
pub mod stats;
mod status;
pub mod txn;
mod uring;
mod waiting;
mod workers;

pub use filesystem::{HurricaneFuse, MountInfo, MAX_READAHEAD, MAX_WRITE};
pub use filesystem::{DIR_LAYOUT_XATTR, LAYOUT_XATTR, STATS_XATTR, STATUS_XATTR};
pub use names::NameCache;
pub use options::MountOptions;
pub use report::StatsReport;
pub use serve::{is_dead_mount, serve, DEAD_MOUNT_HINT};
