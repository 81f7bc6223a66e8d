//! The extended attributes through which Hurricane's own settings are read
//! and changed (`getfattr`/`setfattr` on a mount, `Fs::getxattr`/`setxattr`
//! in process). Every crate names them through these constants.

/// A file's layout: reading gives its layout spec; setting it on an empty
/// file chooses the layout its data will have, and on a file holding data
/// moves the data to that layout while the file stays in use (the call
/// returns once it is done).
pub const LAYOUT: &str = "user.hurricane.layout";
/// A file being moved to a new layout: reading gives the old and new
/// layouts and how far the copy has come (absent when none is under way).
pub const MIGRATION: &str = "user.hurricane.migration";
/// A directory's default layout for files created in it (and, unless they
/// set their own, in its subdirectories).
pub const DIR_LAYOUT: &str = "user.hurricane.dir_layout";
/// How a file (or the files of a directory) is opened by default: an
/// [`crate::open::OpenSpec`].
pub const OPEN: &str = "user.hurricane.open";
/// On a mount's root: the mount's statistics report (counters; cheap to
/// read, whatever the pool's size).
pub const STATS: &str = "user.hurricane.stats";
/// On a mount's root: the pool's status, each device's state and every
/// file's health (a walk of the whole pool, made at each read).
pub const STATUS: &str = "user.hurricane.status";
/// On a mount's root: maintenance jobs (scrub, device replacement). Setting
/// it starts one (a JSON request, root only); reading it gives its status.
pub const CONTROL: &str = "user.hurricane.control";
/// A file's capabilities (capabilities(7)), kept as any attribute and
/// dropped by every write (`Fs::drop_caps`).
pub const CAPS: &str = "security.capability";
/// A file's transaction protection: "1" lets transactions (`Fs::begin`)
/// write the file and makes every other write to it take the same range
/// locks; "0" (or absent) leaves the file out of transactions.
pub const TXN: &str = "user.hurricane.txn";
