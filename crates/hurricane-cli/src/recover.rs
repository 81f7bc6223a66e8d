//! `hurricane recover POOL DEST`: copy every file still reachable from a
//! damaged pool into the directory DEST, reading the pool only, and list
//! what could not be saved (the engine's `salvage` does the reading).
//!
//! DEST is made (or must be an empty directory). Everything below it is
//! made through its directory's descriptor, never through a link, and
//! private (0700, 0600) until it is whole; then it gets the pool's
//! permission bits and times. Owners are kept only with `--owners` (root
//! only); without it the copies belong to the caller and lose their
//! set-user-ID and set-group-ID bits, so root recovering another user's
//! files never makes a set-id program of its own. Device nodes, FIFOs and
//! sockets are not made: they are listed as not saved.

use crate::files::copy_mode;
use crate::util::{interactive, CliResult, Fail, PoolLock};
use clap::Args;
use hurricane::dirfile::Dir;
use hurricane::salvage::{Sink, Source};
use hurricane::Attr;
use indicatif::{ProgressBar, ProgressStyle};
use rustix::fs::{AtFlags, Mode, Timespec, Timestamps};
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Exit status when some of the pool could not be saved.
pub const EXIT_PARTIAL: i32 = 4;

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 everything reachable was saved; 1 nothing could be read (or DEST is unusable); 4 some files could not be saved (they are listed)."
)]
pub struct RecoverArgs {
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    /// Where the files go: a new directory, or an empty one.
    pub dest: PathBuf,
    /// Keep the files' owners and their set-id bits (root only).
    #[arg(long)]
    pub owners: bool,
    /// Print only what could not be saved.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

pub fn run(a: &RecoverArgs) -> CliResult {
    if a.owners && !rustix::process::geteuid().is_root() {
        return Err(Fail::new("--owners: only root can give files to other users"));
    }
    // Shared, as every read-only command takes it: no writer meanwhile.
    let _lock = PoolLock::take(&a.pool, false)?;
    let top = dest_dir(&a.dest)?;
    let src = Source::open_dir(&a.pool)?;
    let pb = bar();
    let mut sink = DirSink { dirs: vec![(Vec::new(), top)], file: None, owners: a.owners };
    let rep = src.salvage(&mut sink, &mut |r, path| {
        pb.set_message(format!(
            "{} files, {} directories, {} MiB; {}",
            r.files,
            r.dirs,
            r.bytes >> 20,
            String::from_utf8_lossy(path)
        ));
        pb.tick();
    });
    pb.finish_and_clear();
    let rep = rep?;
    let _ = src.close();
    for n in &rep.notes {
        if !a.quiet {
            println!("note: {n}");
        }
    }
    for (what, why) in &rep.lost {
        println!("not saved: {what}: {why}");
    }
    if !a.quiet {
        println!(
            "{}: {} files ({} bytes), {} directories, {} symlinks, {} hard links saved to {}{}",
            a.pool.display(),
            rep.files,
            rep.bytes,
            rep.dirs,
            rep.symlinks,
            rep.links,
            a.dest.display(),
            if rep.unreachable > 0 {
                format!(" ({} not reachable from the root, under lost+found)", rep.unreachable)
            } else {
                String::new()
            }
        );
    }
    if rep.is_complete() {
        Ok(())
    } else {
        Err(Fail::code(
            EXIT_PARTIAL,
            format!("{}: {} items could not be saved whole (listed above)", a.pool.display(), rep.lost.len()),
        ))
    }
}

/// DEST, made private if missing; an existing one must be an empty
/// directory (a link there is followed only if it is the caller's or
/// root's, as `get` does).
fn dest_dir(dest: &Path) -> CliResult<Dir> {
    match std::fs::symlink_metadata(dest) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let (parent, name) = Dir::split(dest)?;
            parent.mkdir(&name, 0o700)?;
            Ok(parent.subdir(&name)?)
        }
        Err(e) => Err(Fail::new(format!("{}: {e}", dest.display()))),
        Ok(m) => {
            use std::os::unix::fs::MetadataExt;
            let me = rustix::process::geteuid().as_raw();
            let ok = m.is_dir() || (m.file_type().is_symlink() && (m.uid() == 0 || m.uid() == me) && dest.is_dir());
            if !ok {
                return Err(Fail::new(format!("{}: exists and is not a directory", dest.display())));
            }
            let d = Dir::open(dest)?;
            if !d.names()?.is_empty() {
                return Err(Fail::new(format!(
                    "{}: not empty (recover writes into a new or empty directory)",
                    dest.display()
                )));
            }
            Ok(d)
        }
    }
}

fn bar() -> ProgressBar {
    if !interactive() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    if let Ok(st) = ProgressStyle::with_template("recovering {spinner} {msg}") {
        pb.set_style(st);
    }
    pb
}

/// Writes what the salvage hands over below DEST.
struct DirSink {
    /// The directories being filled, DEST first: path and handle.
    dirs: Vec<(Vec<u8>, Dir)>,
    /// The file being written: its parent's index, its name, the file.
    file: Option<(usize, Vec<u8>, File)>,
    owners: bool,
}

fn other(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&c| c == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

fn times(a: &Attr) -> Timestamps {
    let ts = |ns: i64| Timespec { tv_sec: ns.div_euclid(1_000_000_000), tv_nsec: ns.rem_euclid(1_000_000_000) as _ };
    Timestamps { last_access: ts(a.atime), last_modification: ts(a.mtime) }
}

impl DirSink {
    /// The open directory `path` names the parent of, and the last name.
    fn parent<'a>(&self, path: &'a [u8]) -> io::Result<(usize, &'a OsStr)> {
        let (dir, name) = split(path);
        let i = self
            .dirs
            .iter()
            .rposition(|(p, _)| p == dir)
            .ok_or_else(|| other(format!("{}: its directory is not open", String::from_utf8_lossy(dir))))?;
        Ok((i, OsStr::from_bytes(name)))
    }

    /// The mode the copy gets: the pool's permission bits, set-id bits
    /// only when the owner is kept.
    fn mode(&self, a: &Attr, dir: bool) -> u32 {
        if self.owners {
            a.mode & 0o7777
        } else {
            copy_mode(a.mode, dir)
        }
    }

    fn finish(&self, fd: impl rustix::fd::AsFd, a: &Attr, dir: bool) -> io::Result<()> {
        if self.owners {
            // Before the mode: a change of owner clears set-id bits.
            rustix::fs::fchown(
                &fd,
                Some(rustix::process::Uid::from_raw(a.uid)),
                Some(rustix::process::Gid::from_raw(a.gid)),
            )
            .map_err(io::Error::from)?;
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(self.mode(a, dir))).map_err(io::Error::from)?;
        rustix::fs::futimens(&fd, &times(a)).map_err(io::Error::from)
    }
}

impl Sink for DirSink {
    fn dir(&mut self, path: &[u8], _: &Attr) -> io::Result<()> {
        if path.is_empty() {
            return Ok(());
        }
        let (i, name) = self.parent(path)?;
        let d = &self.dirs[i].1;
        d.mkdir(name, 0o700).map_err(other)?;
        let sub = d.subdir(name).map_err(other)?;
        self.dirs.push((path.to_vec(), sub));
        Ok(())
    }

    fn dir_done(&mut self, path: &[u8], a: &Attr) -> io::Result<()> {
        let i = self.dirs.iter().rposition(|(p, _)| p == path).ok_or_else(|| other("directory not open"))?;
        let r = self.finish(self.dirs[i].1.fd(), a, true);
        if i > 0 {
            self.dirs.truncate(i);
        }
        r
    }

    fn file(&mut self, path: &[u8], _: &Attr) -> io::Result<()> {
        let (i, name) = self.parent(path)?;
        let f = self.dirs[i].1.create_new(name, 0o600).map_err(other)?;
        self.file = Some((i, name.as_bytes().to_vec(), f));
        Ok(())
    }

    fn data(&mut self, off: u64, data: &[u8]) -> io::Result<()> {
        let (_, _, f) = self.file.as_ref().ok_or_else(|| other("no file begun"))?;
        f.write_all_at(data, off)
    }

    fn file_done(&mut self, a: &Attr) -> io::Result<()> {
        let (_, _, f) = self.file.take().ok_or_else(|| other("no file begun"))?;
        // Unreadable ranges at the end stay holes.
        f.set_len(a.size)?;
        f.sync_all()?;
        self.finish(&f, a, false)
    }

    fn hard_link(&mut self, path: &[u8], existing: &[u8]) -> io::Result<()> {
        let (i, name) = self.parent(path)?;
        let (ei, ename) = match self.parent(existing) {
            Ok(x) => x,
            // Its directory was finished: through DEST's path (made here,
            // private while it fills), the last name not followed.
            Err(_) => {
                let full = self.dirs[0].1.path().join(OsStr::from_bytes(existing));
                return rustix::fs::linkat(rustix::fs::CWD, &full, self.dirs[i].1.fd(), name, AtFlags::empty())
                    .map_err(io::Error::from);
            }
        };
        rustix::fs::linkat(self.dirs[ei].1.fd(), ename, self.dirs[i].1.fd(), name, AtFlags::empty())
            .map_err(io::Error::from)
    }

    fn symlink(&mut self, path: &[u8], target: &[u8], a: &Attr) -> io::Result<()> {
        let (i, name) = self.parent(path)?;
        let d = &self.dirs[i].1;
        d.symlink(OsStr::from_bytes(target), name).map_err(other)?;
        if self.owners {
            rustix::fs::chownat(
                d.fd(),
                name,
                Some(rustix::process::Uid::from_raw(a.uid)),
                Some(rustix::process::Gid::from_raw(a.gid)),
                AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(io::Error::from)?;
        }
        rustix::fs::utimensat(d.fd(), name, &times(a), AtFlags::SYMLINK_NOFOLLOW).map_err(io::Error::from)
    }

    fn special(&mut self, _: &[u8], _: &Attr) -> io::Result<()> {
        Err(other("a device node, FIFO or socket: not made"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_at_the_last_slash() {
        assert_eq!(split(b"a/b/c"), (&b"a/b"[..], &b"c"[..]));
        assert_eq!(split(b"top"), (&b""[..], &b"top"[..]));
    }

    #[test]
    fn times_keep_nanoseconds_and_times_before_1970() {
        let a = Attr {
            ino: 1,
            size: 0,
            blocks: 0,
            atime: -1,
            mtime: 1_500_000_000_123_456_789,
            ctime: 0,
            btime: 0,
            mode: 0o100644,
            nlink: 1,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
        };
        let t = times(&a);
        assert_eq!((t.last_access.tv_sec, t.last_access.tv_nsec), (-1, 999_999_999));
        assert_eq!((t.last_modification.tv_sec, t.last_modification.tv_nsec), (1_500_000_000, 123_456_789));
    }
}
