//! Shared pieces of the commands: the error type, sizes, times, modes,
//! opening a pool (with a lock against a second user) and progress bars.

use hurricane::{Fs, Options};
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt;
use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

/// A command failure: one line for stderr and the exit code.
#[derive(Debug)]
pub struct Fail {
    pub msg: String,
    pub code: i32,
}

impl Fail {
    pub fn new(msg: impl Into<String>) -> Self {
        Fail { msg: msg.into(), code: 1 }
    }
    pub fn code(code: i32, msg: impl Into<String>) -> Self {
        Fail { msg: msg.into(), code }
    }
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl From<hurricane::Error> for Fail {
    fn from(e: hurricane::Error) -> Self {
        Fail::new(e.to_string())
    }
}

impl From<String> for Fail {
    fn from(s: String) -> Self {
        Fail::new(s)
    }
}

impl From<std::io::Error> for Fail {
    fn from(e: std::io::Error) -> Self {
        // A closed pipe (`hurricane cat ... | head`) is not an error.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Fail::code(0, "");
        }
        Fail::new(e.to_string())
    }
}

pub type CliResult<T = ()> = Result<T, Fail>;

/// Adds context to an error: `what: error`.
pub trait Context<T> {
    fn ctx(self, what: impl fmt::Display) -> CliResult<T>;
}

impl<T, E: fmt::Display> Context<T> for Result<T, E> {
    fn ctx(self, what: impl fmt::Display) -> CliResult<T> {
        self.map_err(|e| Fail::new(format!("{what}: {e}")))
    }
}

/// Parses a size: `4096`, `64K`, `1.5G`, `2GiB`, `1T` (binary multiples).
pub fn parse_size(s: &str) -> Result<u64, String> {
    hurricane::units::parse_size(s).map_err(|e| format!("{s:?}: {e}"))
}

/// A layout spec as given on the command line, with every `map=@FILE`
/// replaced by the map that local file holds (a `table`'s ranges, one
/// `START-END:CHILD` a line, the last `START-:CHILD`; blank lines and
/// `#` comments skipped).
pub fn spec_arg(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("map=@") {
        out.push_str(&rest[..i + 4]);
        let after = &rest[i + 5..];
        // The path runs to the parameter's end: `,` or `)`.
        let end = after.find([',', ')']).unwrap_or(after.len());
        let path = &after[..end];
        if path.is_empty() {
            return Err("map=@ names no file".into());
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("map=@{path}: {e}"))?;
        let lines: Vec<&str> =
            text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()).collect();
        if lines.is_empty() {
            return Err(format!("map=@{path}: the file holds no ranges"));
        }
        if let Some(bad) = lines.iter().find(|l| l.contains([';', ',', ')', '(', '[', ']', ' '])) {
            return Err(format!("map=@{path}: {bad:?} is not a START-END:CHILD line"));
        }
        out.push_str(&lines.join(";"));
        rest = &after[end..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `1.5 GiB` style.
pub use hurricane::units::human;

/// `-rw-r--r--` for a mode.
pub fn mode_string(mode: u32) -> String {
    let kind = match mode & libc::S_IFMT {
        libc::S_IFDIR => 'd',
        libc::S_IFLNK => 'l',
        libc::S_IFCHR => 'c',
        libc::S_IFBLK => 'b',
        libc::S_IFIFO => 'p',
        libc::S_IFSOCK => 's',
        _ => '-',
    };
    let mut s = String::with_capacity(10);
    s.push(kind);
    let bits = [
        (0o400, 'r'),
        (0o200, 'w'),
        (0o100, 'x'),
        (0o040, 'r'),
        (0o020, 'w'),
        (0o010, 'x'),
        (0o004, 'r'),
        (0o002, 'w'),
        (0o001, 'x'),
    ];
    for (i, (b, c)) in bits.iter().enumerate() {
        let special = match i {
            2 => mode & libc::S_ISUID != 0,
            5 => mode & libc::S_ISGID != 0,
            8 => mode & libc::S_ISVTX != 0,
            _ => false,
        };
        let set = mode & b != 0;
        s.push(match (special, set, i) {
            (true, true, 8) => 't',
            (true, false, 8) => 'T',
            (true, true, _) => 's',
            (true, false, _) => 'S',
            (false, true, _) => *c,
            (false, false, _) => '-',
        });
    }
    s
}

pub fn kind_word(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => "directory",
        libc::S_IFLNK => "symbolic link",
        libc::S_IFREG => "regular file",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        _ => "unknown",
    }
}

/// Local time of nanoseconds since the epoch: (y, mon, d, h, min, s, utc offset in s).
fn local(ns: i64) -> Option<(i32, u32, u32, u32, u32, u32, i64)> {
    let secs = ns.div_euclid(1_000_000_000) as libc::time_t;
    // SAFETY: `libc::tm` holds integers and one pointer (`tm_zone`), for
    // all of which zero is a valid value (a null pointer).
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: localtime_r reads `secs` and writes only into `tm`, both of
    // which outlive the call.
    let r = unsafe { libc::localtime_r(&secs, &mut tm) };
    if r.is_null() {
        return None;
    }
    Some((
        tm.tm_year + 1900,
        tm.tm_mon as u32 + 1,
        tm.tm_mday as u32,
        tm.tm_hour as u32,
        tm.tm_min as u32,
        tm.tm_sec as u32,
        tm.tm_gmtoff,
    ))
}

/// `2024-05-01 12:34` (for listings).
pub fn short_time(ns: i64) -> String {
    match local(ns) {
        Some((y, mo, d, h, mi, _, _)) => format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}"),
        None => ns.to_string(),
    }
}

/// `2024-05-01 12:34:56.123456789 +0200` (for stat).
pub fn full_time(ns: i64) -> String {
    match local(ns) {
        Some((y, mo, d, h, mi, s, off)) => {
            let sign = if off < 0 { '-' } else { '+' };
            let off = off.abs();
            format!(
                "{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}.{:09} {sign}{:02}{:02}",
                ns.rem_euclid(1_000_000_000),
                off / 3600,
                (off % 3600) / 60
            )
        }
        None => ns.to_string(),
    }
}

/// Whether progress bars should be drawn.
pub fn interactive() -> bool {
    std::io::stderr().is_terminal()
}

/// A byte-count bar on stderr (hidden unless stderr is a terminal).
pub fn bytes_bar(total: u64, what: &str) -> ProgressBar {
    bar(total, what, "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
}

/// A file-count bar on stderr (hidden unless stderr is a terminal).
pub fn files_bar(total: u64, what: &str) -> ProgressBar {
    bar(total, what, "{msg} [{bar:30}] {pos}/{len} files eta {eta}")
}

/// A bar of `total` drawn with `template` on stderr (hidden unless stderr
/// is a terminal).
fn bar(total: u64, what: &str, template: &str) -> ProgressBar {
    if !interactive() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    if let Ok(st) = ProgressStyle::with_template(template) {
        pb.set_style(st.progress_chars("=> "));
    }
    pb.set_message(what.to_string());
    pb
}

/// A spinner or counter bar on stderr (hidden unless stderr is a terminal).
pub fn spinner(what: &str) -> ProgressBar {
    if !interactive() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    if let Ok(st) = ProgressStyle::with_template("{spinner} {msg} [{elapsed}]") {
        pb.set_style(st);
    }
    pb.set_message(what.to_string());
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

/// A POOL argument: a pool directory (or a mount point), or a pool found
/// by name in a Ceph cluster, `rados:CEPHPOOL/NAME?conf=PATH`, which
/// becomes this host's directory for it, brought up to date from the
/// cluster (`hurricane::pool::published`).
pub fn pool_arg(s: &str) -> Result<std::path::PathBuf, String> {
    if !hurricane::device::is_rados(s) {
        return Ok(std::path::PathBuf::from(s));
    }
    let root = hurricane::pool::published::local_root();
    hurricane::pool::published::locate(s, &root).map_err(|e| e.to_string())
}

/// How long a command waits for a pool's lock held with no mount of the
/// pool left (a server closing it after an unmount, another command).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// An advisory lock on a pool directory, held while a command uses it:
/// several readers, or one writer. Mounts take it too, so a command refuses
/// a mounted pool instead of racing the mount.
pub struct PoolLock {
    _file: std::fs::File,
}

impl PoolLock {
    /// Locks the pool directory itself, as the FUSE server does.
    pub fn take(dir: &Path, exclusive: bool) -> CliResult<PoolLock> {
        warn_if_foreign(dir);
        // Let the engine name what is wrong with a directory that is not a pool.
        hurricane::pool::device_paths(dir)?;
        let file = std::fs::File::open(dir).map_err(|e| Fail::new(format!("{}: {e}", dir.display())))?;
        use rustix::fs::FlockOperation::{NonBlockingLockExclusive, NonBlockingLockShared};
        let op = if exclusive { NonBlockingLockExclusive } else { NonBlockingLockShared };
        // A server that was just unmounted is waited for while it closes the pool.
        hurricane_fuse::mountinfo::lock_pool_dir(&file, dir, op, LOCK_WAIT)
            .map_err(|e| Fail::new(format!("{}: {e}", dir.display())))?;
        Ok(PoolLock { _file: file })
    }
}

/// Warns on stderr when root works on a pool directory another user
/// controls: one owned by another user, or writable by others without the
/// sticky bit. Its pool.conf says which devices root opens and writes, so
/// root should know whose word that is. (What root writes there follows no
/// link: `hurricane::dirfile`.) Every command on a pool directory, and
/// every mount, comes through here.
pub fn warn_if_foreign(dir: &Path) {
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let Ok(st) = rustix::fs::stat(dir) else { return };
    if let Some(why) = hurricane::dirfile::foreign_dir(&st, 0) {
        eprintln!(
            "hurricane: warning: {}: root is using a pool directory {why}; its user decides which devices \
             root opens (check its pool.conf)",
            dir.display()
        );
    }
}

/// An open pool and its lock; `close` checkpoints and marks it clean.
pub struct Pool {
    pub fs: Fs,
    _lock: PoolLock,
}

impl Pool {
    /// Opens read-only, or writable with the background committer (so long
    /// commands keep the journal short and freed space comes back).
    pub fn open(dir: &Path, writable: bool) -> CliResult<Pool> {
        Pool::open_with(dir, Options { read_only: !writable, background_commit: writable, ..Options::default() })
    }

    pub fn open_with(dir: &Path, opts: Options) -> CliResult<Pool> {
        let lock = PoolLock::take(dir, !opts.read_only)?;
        let fs = Fs::open_dir(dir, opts)?;
        Ok(Pool { fs, _lock: lock })
    }

    /// Runs `f`, then closes the pool whatever `f` returned (an error from
    /// `f` wins over one from closing).
    pub fn run<T>(dir: &Path, writable: bool, f: impl FnOnce(&Fs) -> CliResult<T>) -> CliResult<T> {
        Pool::open(dir, writable)?.finish(f)
    }

    pub fn finish<T>(self, f: impl FnOnce(&Fs) -> CliResult<T>) -> CliResult<T> {
        let p = self;
        let r = f(&p.fs);
        let c = p.fs.close();
        let v = r?;
        c.map_err(|e| Fail::new(format!("closing the pool: {e}")))?;
        Ok(v)
    }
}

/// The invoking user, who owns what the CLI creates (the path API creates as root).
pub fn owner() -> (u32, u32) {
    (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw())
}

/// Hands a new inode to the invoking user.
pub fn chown_to_user(fs: &Fs, ino: u64) -> CliResult {
    let (uid, gid) = owner();
    if uid != 0 || gid != 0 {
        let s = hurricane::SetAttr { uid: Some(uid), gid: Some(gid), ..Default::default() };
        fs.setattr(&hurricane::Creds::root(), ino, &s)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert!(parse_size("").is_err());
        assert!(parse_size("G").is_err());
        assert!(parse_size("12X").is_err());
        assert!(parse_size("-1M").is_err());
        assert!(parse_size("99999999999999T").is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(200 << 20), "200 MiB");
        assert_eq!(mode_string(libc::S_IFDIR | 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(libc::S_IFREG | 0o4755), "-rwsr-xr-x");
        assert_eq!(mode_string(libc::S_IFDIR | 0o1777), "drwxrwxrwt");
    }
}
