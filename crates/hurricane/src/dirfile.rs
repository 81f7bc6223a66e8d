//! Files written in a directory that another user may control: a pool
//! directory (`pool.conf`, the scrub position, the mount's log) belongs to
//! whoever made the pool, and root's commands and mounts work in it too.
//!
//! Every name is opened relative to the directory's descriptor and never
//! through a symbolic link (`O_NOFOLLOW`). A temporary file is made with
//! `O_CREAT | O_EXCL` after a stale one (left by a crash, or a link someone
//! planted) is removed with `unlinkat`, which removes a link, not what it
//! points at. A whole file is replaced by renaming the synced temporary
//! over it (`renameat` replaces a link found at the name, never its target)
//! and syncing the directory, so a crash leaves the old file or the new
//! one. So the owner of a pool directory cannot get a process run by root
//! to write a file of her choosing, whatever links she leaves there.
//!
//! [`untrusted`] says why root should not take a file's contents as its
//! own (a config another user can change), [`foreign_dir`] why root should
//! think twice before working in a directory.

use crate::error::{Error, Result};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// An open directory, the base of every name below.
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

fn errno(what: impl std::fmt::Display, e: Errno) -> Error {
    Error::io(what.to_string(), e.into())
}

impl Dir {
    /// Opens the directory `path`. The path itself is resolved as given
    /// (links included): it is the caller's choice; what is done below it
    /// is not.
    pub fn open(path: &Path) -> Result<Dir> {
        let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| errno(path.display(), e))?;
        Ok(Dir { fd, path: path.to_path_buf() })
    }

    /// The directory holding `file`, opened, and `file`'s last component
    /// (the name to use below it).
    pub fn split(file: &Path) -> Result<(Dir, OsString)> {
        let name = file.file_name().ok_or_else(|| Error::Invalid(format!("{}: no file name", file.display())))?;
        let parent = match file.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Ok((Dir::open(parent)?, name.to_os_string()))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor, for calls relative to it.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    fn named(&self, name: &OsStr, e: Errno) -> Error {
        errno(self.path.join(name).display(), e)
    }

    /// What `name` is, not following a link; None when there is nothing.
    pub fn lstat(&self, name: impl AsRef<OsStr>) -> Result<Option<Stat>> {
        let name = name.as_ref();
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(self.named(name, e)),
        }
    }

    /// Removes the file (or link) `name`; nothing there is fine.
    pub fn remove(&self, name: impl AsRef<OsStr>) -> Result<()> {
        let name = name.as_ref();
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(self.named(name, e)),
        }
    }

    /// Makes the file `name`, which must not exist (not even as a link),
    /// open for writing, with permission bits `mode` (less the umask).
    pub fn create_new(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<File> {
        let name = name.as_ref();
        self.create_excl(name, mode, OFlags::WRONLY).map_err(|e| self.named(name, e))
    }

    /// [`Dir::create_new`], open for reading too (a device image). What is
    /// already at `name` (a file, a link, anything) is an error naming it
    /// and saying what it is; nothing there is opened or changed.
    pub fn create_new_rw(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<File> {
        let name = name.as_ref();
        match self.create_excl(name, mode, OFlags::RDWR) {
            Ok(f) => Ok(f),
            Err(Errno::EXIST) => {
                let what = self.lstat(name)?.map(|st| format!(" ({})", kind(&st))).unwrap_or_default();
                Err(Error::Invalid(format!(
                    "{}: already exists{what}: not overwritten",
                    self.path.join(name).display()
                )))
            }
            Err(e) => Err(self.named(name, e)),
        }
    }

    /// Makes `name` with `O_CREAT | O_EXCL | O_NOFOLLOW`, open for `access`.
    fn create_excl(&self, name: &OsStr, mode: u32, access: OFlags) -> std::result::Result<File, Errno> {
        let flags = access | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode & 0o777)).map(File::from)
    }

    /// Renames `from` to `to`, both in this directory (a link at `to` is
    /// replaced, not followed).
    pub fn rename(&self, from: impl AsRef<OsStr>, to: impl AsRef<OsStr>) -> Result<()> {
        let to = to.as_ref();
        rustix::fs::renameat(&self.fd, from.as_ref(), &self.fd, to).map_err(|e| self.named(to, e))
    }

    /// Makes what was renamed or removed here durable.
    pub fn sync(&self) -> Result<()> {
        rustix::fs::fsync(&self.fd).map_err(|e| errno(self.path.display(), e))
    }

    /// Replaces the file `name` with `data`: a temporary file `tmp` (one
    /// left there before is removed first) written, synced, renamed over
    /// `name`, then the directory synced. A crash leaves the old file or
    /// the new one.
    pub fn replace(&self, name: impl AsRef<OsStr>, tmp: impl AsRef<OsStr>, data: &[u8]) -> Result<()> {
        let (name, tmp) = (name.as_ref(), tmp.as_ref());
        self.remove(tmp)?;
        let mut f = self.create_new(tmp, 0o644)?;
        let written = f.write_all(data).and_then(|()| f.sync_all());
        drop(f);
        if let Err(e) = written {
            let _ = self.remove(tmp);
            return Err(Error::io(self.path.join(tmp).display().to_string(), e));
        }
        if let Err(e) = self.rename(tmp, name) {
            let _ = self.remove(tmp);
            return Err(e);
        }
        self.sync()
    }

    /// Opens the regular file `name` to read and append to, made (with
    /// permission bits `mode`, less the umask) when missing. Refuses a
    /// link, anything but a regular file (a FIFO someone left there does
    /// not block the open), and a file with more than one name (a hard
    /// link to another file).
    pub fn open_append(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<File> {
        let name = name.as_ref();
        let flags = OFlags::RDWR
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        let full = self.path.join(name);
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode & 0o777)) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => {
                return Err(Error::Invalid(format!("{}: a symbolic link: not followed", full.display())))
            }
            Err(e) => return Err(self.named(name, e)),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| self.named(name, e))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(Error::Invalid(format!("{}: not a regular file", full.display())));
        }
        if st.st_nlink > 1 {
            return Err(Error::Invalid(format!(
                "{}: has {} names (a hard link): not written to",
                full.display(),
                st.st_nlink
            )));
        }
        // Regular files ignore O_NONBLOCK; clear it all the same, for
        // whoever inherits the descriptor.
        let fl = rustix::fs::fcntl_getfl(&fd).map_err(|e| self.named(name, e))?;
        rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK).map_err(|e| self.named(name, e))?;
        Ok(File::from(fd))
    }
}

impl Dir {
    /// Opens the directory `name` below this one, not through a link.
    pub fn subdir(&self, name: impl AsRef<OsStr>) -> Result<Dir> {
        let name = name.as_ref();
        let path = self.path.join(name);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.fd, name, flags, Mode::empty()) {
            Ok(fd) => Ok(Dir { fd, path }),
            Err(Errno::LOOP) => Err(Error::Invalid(format!("{}: a symbolic link: not followed", path.display()))),
            Err(Errno::NOTDIR) => Err(Error::NotDir(path.display().to_string())),
            Err(e) => Err(errno(path.display(), e)),
        }
    }

    /// Makes the directory `name` (permission bits `mode`, less the umask).
    pub fn mkdir(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<()> {
        let name = name.as_ref();
        rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode & 0o7777)).map_err(|e| self.named(name, e))
    }

    /// Opens the file `name` to read, not through a link (nor waiting on a
    /// FIFO): what it is, the caller asks the file.
    pub fn open_read(&self, name: impl AsRef<OsStr>) -> Result<File> {
        let name = name.as_ref();
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty()).map_err(|e| self.named(name, e))?;
        Ok(File::from(fd))
    }

    /// The target of the link `name`.
    pub fn readlink(&self, name: impl AsRef<OsStr>) -> Result<OsString> {
        let name = name.as_ref();
        let t = rustix::fs::readlinkat(&self.fd, name, Vec::new()).map_err(|e| self.named(name, e))?;
        Ok(OsStr::from_bytes(t.as_bytes()).to_os_string())
    }

    /// Makes the link `name` to `target`.
    pub fn symlink(&self, target: impl AsRef<OsStr>, name: impl AsRef<OsStr>) -> Result<()> {
        let name = name.as_ref();
        rustix::fs::symlinkat(target.as_ref(), &self.fd, name).map_err(|e| self.named(name, e))
    }

    /// The names in this directory (`.` and `..` aside), sorted.
    pub fn names(&self) -> Result<Vec<OsString>> {
        let err = |e| errno(self.path.display(), e);
        let mut out = Vec::new();
        for e in rustix::fs::Dir::read_from(&self.fd).map_err(err)? {
            let e = e.map_err(err)?;
            let n = e.file_name().to_bytes();
            if n != b"." && n != b".." {
                out.push(OsStr::from_bytes(n).to_os_string());
            }
        }
        out.sort();
        Ok(out)
    }
}

/// What `st` describes, in words.
fn kind(st: &Stat) -> &'static str {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => "a regular file",
        FileType::Symlink => "a symbolic link",
        FileType::Directory => "a directory",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::BlockDevice => "a block device",
        FileType::CharacterDevice => "a character device",
        FileType::Unknown => "a file of unknown type",
    }
}

/// Whether users other than the owner (and the root group) can write
/// what has mode `mode` and group `gid`.
fn writable_by_others(mode: u32, gid: u32) -> bool {
    mode & 0o002 != 0 || (mode & 0o020 != 0 && gid != 0)
}

/// Why the directory described by `st` is another user's to change, for a
/// process of user `uid`: owned by another user, or writable by others
/// without the sticky bit (which keeps them from replacing its entries).
/// None when it is not.
pub fn foreign_dir(st: &Stat, uid: u32) -> Option<String> {
    let mode = st.st_mode;
    if st.st_uid != uid {
        return Some(format!("owned by uid {}", st.st_uid));
    }
    if writable_by_others(mode, st.st_gid) && mode & 0o1000 == 0 {
        return Some(format!(
            "writable by {} (mode {:04o})",
            if mode & 0o002 != 0 { "others" } else { "its group" },
            mode & 0o7777
        ));
    }
    None
}

/// Why root should not trust the contents of the file `path` (a config
/// file it is told to read): the file, or a directory above it, is owned
/// by a user other than root, or can be written by one (a directory with
/// the sticky bit aside: its other users cannot replace root's entries).
/// The real path is checked, every link along the way resolved. None when
/// only root controls it; for a process that is not root, always None
/// (its own files are its to trust).
pub fn untrusted(path: &Path) -> Result<Option<String>> {
    if !rustix::process::geteuid().is_root() {
        return Ok(None);
    }
    untrusted_by(path, 0)
}

/// [`untrusted`] for a process of user `uid` (tests).
pub fn untrusted_by(path: &Path, uid: u32) -> Result<Option<String>> {
    let real = std::fs::canonicalize(path).map_err(|e| Error::io(path.display().to_string(), e))?;
    let stat = |p: &Path| rustix::fs::lstat(p).map_err(|e| errno(p.display(), e));
    let st = stat(&real)?;
    if st.st_uid != uid {
        return Ok(Some(format!("{} is owned by uid {}", real.display(), st.st_uid)));
    }
    if writable_by_others(st.st_mode, st.st_gid) {
        return Ok(Some(format!(
            "{} can be written by other users (mode {:04o})",
            real.display(),
            st.st_mode & 0o7777
        )));
    }
    for dir in real.ancestors().skip(1) {
        let st = stat(dir)?;
        if let Some(why) = foreign_dir(&st, uid) {
            return Ok(Some(format!("its directory {} is {why}", dir.display())));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn set_mode(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn replace_removes_a_planted_temporary_and_follows_no_link() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "theirs").unwrap();
        let dir = t.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("f.tmp")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("f")).unwrap();
        let d = Dir::open(&dir).unwrap();
        d.replace("f", "f.tmp", b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"theirs");
        assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"new");
        assert!(std::fs::symlink_metadata(dir.join("f")).unwrap().is_file());
        assert!(d.lstat("f.tmp").unwrap().is_none());
        // A directory in the temporary's place: a clear error, nothing written.
        std::fs::create_dir(dir.join("f.tmp")).unwrap();
        let e = d.replace("f", "f.tmp", b"newer").unwrap_err().to_string();
        assert!(e.contains("f.tmp"), "{e}");
        assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"new");
    }

    #[test]
    fn create_new_rw_makes_only_new_files_and_says_what_was_there() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "theirs").unwrap();
        let d = Dir::open(t.path()).unwrap();
        std::os::unix::fs::symlink(&victim, t.path().join("link")).unwrap();
        std::os::unix::fs::symlink(t.path().join("nowhere"), t.path().join("dangling")).unwrap();
        std::fs::create_dir(t.path().join("dir")).unwrap();
        for (name, what) in
            [("link", "symbolic link"), ("dangling", "symbolic link"), ("victim", "regular file"), ("dir", "directory")]
        {
            let e = d.create_new_rw(name, 0o644).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains(what) && e.contains("already exists"), "{e}");
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"theirs");
        assert!(d.lstat("nowhere").unwrap().is_none(), "made through a dangling link");
        let mut f = d.create_new_rw("new", 0o644).unwrap();
        f.write_all(b"rw").unwrap();
        let mut back = String::new();
        use std::io::{Read, Seek};
        f.rewind().unwrap();
        f.read_to_string(&mut back).unwrap();
        assert_eq!(back, "rw");
    }

    #[test]
    fn append_opens_only_a_regular_file_of_one_name() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, "theirs").unwrap();
        let d = Dir::open(t.path()).unwrap();
        std::os::unix::fs::symlink(&victim, t.path().join("link")).unwrap();
        let e = d.open_append("link", 0o644).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        std::fs::hard_link(&victim, t.path().join("hard")).unwrap();
        let e = d.open_append("hard", 0o644).unwrap_err().to_string();
        assert!(e.contains("hard link"), "{e}");
        rustix::fs::mkfifoat(d.fd(), "fifo", Mode::from_raw_mode(0o644)).unwrap();
        let e = d.open_append("fifo", 0o644).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"theirs");
        let mut f = d.open_append("log", 0o644).unwrap();
        f.write_all(b"a").unwrap();
        drop(f);
        d.open_append("log", 0o644).unwrap().write_all(b"b").unwrap();
        assert_eq!(std::fs::read(t.path().join("log")).unwrap(), b"ab");
    }

    #[test]
    fn a_config_is_trusted_only_when_no_other_user_controls_it() {
        let t = tempfile::tempdir().unwrap();
        let me = rustix::process::geteuid().as_raw();
        let conf = t.path().join("ceph.conf");
        std::fs::write(&conf, "[global]\n").unwrap();
        set_mode(&conf, 0o644);
        set_mode(t.path(), 0o755);
        // The temporary directory's ancestors (/, /tmp) are root's, or
        // sticky; for a user that is not root they are another's.
        let ours = |p: &Path| untrusted_by(p, me).unwrap();
        if me == 0 {
            assert_eq!(ours(&conf), None);
        }
        set_mode(&conf, 0o666);
        assert!(ours(&conf).is_some_and(|w| w.contains("written by other users")));
        set_mode(&conf, 0o644);
        // Another user's file, or a file in another user's directory.
        let other = me + 1;
        let why = untrusted_by(&conf, other).unwrap().unwrap();
        assert!(why.contains(&format!("owned by uid {me}")), "{why}");
        if me == 0 {
            std::os::unix::fs::chown(&conf, Some(65534), None).unwrap();
            let why = untrusted(&conf).unwrap().unwrap();
            assert!(why.contains("owned by uid 65534"), "{why}");
            std::os::unix::fs::chown(&conf, Some(0), None).unwrap();
            std::os::unix::fs::chown(t.path(), Some(65534), None).unwrap();
            let why = untrusted(&conf).unwrap().unwrap();
            assert!(why.contains("owned by uid 65534") && why.contains("its directory"), "{why}");
            std::os::unix::fs::chown(t.path(), Some(0), None).unwrap();
        }
        set_mode(t.path(), 0o777);
        if me == 0 {
            let why = ours(&conf).unwrap();
            assert!(why.contains("writable by others") && why.contains(&t.path().display().to_string()), "{why}");
            set_mode(t.path(), 0o1777);
            assert_eq!(ours(&conf), None, "a sticky directory keeps root's entries root's");
        }
        set_mode(t.path(), 0o755);
        // A link is judged by what it leads to.
        let link = t.path().join("link.conf");
        std::os::unix::fs::symlink(&conf, &link).unwrap();
        assert_eq!(ours(&link), ours(&conf));
        assert!(untrusted_by(&t.path().join("missing"), me).is_err());
    }
}
