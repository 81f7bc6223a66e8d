//! The path-level native API: resolve paths, open files with per-open
//! options, and use them through `std::io` traits or positioned I/O.

use super::ops::{check_name, Attr, DirItem, RenameFlags, SetAttr};
use super::Fs;
use crate::error::{Error, Result};
use crate::journal::Ino;
use crate::namespace::inode::{S_IFDIR, S_IFREG};
use crate::namespace::{Creds, ROOT};
use std::io::{self, Read, Seek, SeekFrom, Write};

const MAX_SYMLINKS: usize = 40;
pub const PATH_MAX: usize = 4096;

/// How to open a file through the native API (like `std::fs::OpenOptions`,
/// plus the layout a created file gets).
#[derive(Debug, Clone)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: u32,
    layout: Option<String>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            mode: 0o644,
            layout: None,
        }
    }
}

impl OpenOptions {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn read(&mut self, v: bool) -> &mut Self {
        self.read = v;
        self
    }
    pub fn write(&mut self, v: bool) -> &mut Self {
        self.write = v;
        self
    }
    pub fn append(&mut self, v: bool) -> &mut Self {
        self.append = v;
        self
    }
    pub fn truncate(&mut self, v: bool) -> &mut Self {
        self.truncate = v;
        self
    }
    pub fn create(&mut self, v: bool) -> &mut Self {
        self.create = v;
        self
    }
    pub fn create_new(&mut self, v: bool) -> &mut Self {
        self.create_new = v;
        self
    }
    pub fn mode(&mut self, m: u32) -> &mut Self {
        self.mode = m;
        self
    }
    /// Layout spec for a file this open creates.
    pub fn layout(&mut self, spec: &str) -> &mut Self {
        self.layout = Some(spec.to_string());
        self
    }
    pub fn open(&self, fs: &Fs, path: &str) -> Result<File> {
        fs.open_with(path, self)
    }
}

/// An open file of the native API: a cursor over a file, safe to share
/// across threads by reference for positioned I/O (`read_at`, `write_at`).
pub struct File {
    fs: Fs,
    ino: Ino,
    pos: u64,
    append: bool,
    readable: bool,
    writable: bool,
}

fn split(path: &str) -> Result<Vec<&[u8]>> {
    if path.len() > PATH_MAX {
        return Err(Error::NameTooLong(format!("path of {} bytes", path.len())));
    }
    Ok(path.split('/').filter(|c| !c.is_empty() && *c != ".").map(str::as_bytes).collect())
}

impl Fs {
    /// Resolves a path from the root (as root), following symlinks.
    pub fn resolve(&self, path: &str) -> Result<Ino> {
        self.resolve_as(&Creds::root(), path, true)
    }

    pub fn resolve_as(&self, cred: &Creds, path: &str, follow_last: bool) -> Result<Ino> {
        let mut budget = MAX_SYMLINKS;
        self.walk(cred, ROOT, path, follow_last, &mut budget)
    }

    fn walk(&self, cred: &Creds, start: Ino, path: &str, follow_last: bool, budget: &mut usize) -> Result<Ino> {
        let parts = split(path)?;
        let mut cur = if path.starts_with('/') { ROOT } else { start };
        for (i, name) in parts.iter().enumerate() {
            let a = self.lookup(cred, cur, name).map_err(|e| match e {
                Error::NotFound(_) => Error::NotFound(path.to_string()),
                e => e,
            })?;
            let last = i + 1 == parts.len();
            if a.is_symlink() && (!last || follow_last) {
                if *budget == 0 {
                    return Err(Error::Loop(path.to_string()));
                }
                *budget -= 1;
                let target = self.readlink(a.ino)?;
                let t = String::from_utf8(target).map_err(|_| Error::Invalid("symlink target is not UTF-8".into()))?;
                cur = self.walk(cred, cur, &t, true, budget)?;
            } else {
                if !last && !a.is_dir() {
                    return Err(Error::NotDir(path.to_string()));
                }
                cur = a.ino;
            }
        }
        Ok(cur)
    }

    /// The parent directory of a path and its last component.
    fn parent_of<'p>(&self, path: &'p str) -> Result<(Ino, &'p [u8])> {
        let trimmed = path.trim_end_matches('/');
        let (dir, name) = match trimmed.rfind('/') {
            Some(i) => (&trimmed[..i], &trimmed[i + 1..]),
            None => ("", trimmed),
        };
        check_name(name.as_bytes())?;
        let p = self.resolve_as(&Creds::root(), if dir.is_empty() { "/" } else { dir }, true)?;
        Ok((p, name.as_bytes()))
    }

    pub fn stat(&self, path: &str) -> Result<Attr> {
        self.getattr(self.resolve(path)?)
    }

    pub fn lstat(&self, path: &str) -> Result<Attr> {
        self.getattr(self.resolve_as(&Creds::root(), path, false)?)
    }

    pub fn mkdir_path(&self, path: &str, mode: u32) -> Result<Attr> {
        let (p, name) = self.parent_of(path)?;
        self.mkdir(&Creds::root(), p, name, mode)
    }

    /// Creates every missing directory along `path`.
    pub fn mkdir_all(&self, path: &str, mode: u32) -> Result<Ino> {
        let mut cur = ROOT;
        for name in split(path)? {
            cur = match self.lookup(&Creds::root(), cur, name) {
                Ok(a) if a.is_dir() => a.ino,
                Ok(_) => return Err(Error::NotDir(path.to_string())),
                Err(Error::NotFound(_)) => self.mkdir(&Creds::root(), cur, name, mode)?.ino,
                Err(e) => return Err(e),
            };
        }
        Ok(cur)
    }

    pub fn symlink_path(&self, target: &str, path: &str) -> Result<Attr> {
        let (p, name) = self.parent_of(path)?;
        self.symlink(&Creds::root(), p, name, target.as_bytes())
    }

    pub fn hard_link(&self, existing: &str, new: &str) -> Result<Attr> {
        let ino = self.resolve_as(&Creds::root(), existing, false)?;
        let (p, name) = self.parent_of(new)?;
        self.link(&Creds::root(), ino, p, name)
    }

    /// Removes a file, symlink or empty directory.
    pub fn remove(&self, path: &str) -> Result<()> {
        let (p, name) = self.parent_of(path)?;
        let a = self.lookup(&Creds::root(), p, name)?;
        if a.is_dir() {
            self.rmdir(&Creds::root(), p, name)
        } else {
            self.unlink(&Creds::root(), p, name)
        }
    }

    pub fn rename_path(&self, from: &str, to: &str) -> Result<()> {
        let (sp, sn) = self.parent_of(from)?;
        let (dp, dn) = self.parent_of(to)?;
        self.rename(&Creds::root(), sp, sn, dp, dn, RenameFlags::default())
    }

    /// The regular files a tree job works on (`verb` names the job in the
    /// refusal of a directory without `recursive`): `path` itself if it is
    /// one, else every regular file under it, with their inode numbers and
    /// sizes, sorted by path.
    pub(crate) fn regular_files(&self, path: &str, recursive: bool, verb: &str) -> Result<Vec<(String, Ino, u64)>> {
        let top = self.resolve(path)?;
        let a = self.getattr(top)?;
        let mut files = Vec::new();
        if a.is_dir() {
            if !recursive {
                return Err(Error::IsDir(format!("{path} is a directory ({verb} its files with -r)")));
            }
            let mut dirs = vec![path.trim_end_matches('/').to_string()];
            while let Some(d) = dirs.pop() {
                for e in self.read_dir(if d.is_empty() { "/" } else { &d })? {
                    let name = String::from_utf8_lossy(&e.name);
                    let p = format!("{d}/{name}");
                    match e.kind & libc::S_IFMT {
                        libc::S_IFDIR => dirs.push(p),
                        libc::S_IFREG => files.push((p, e.ino, self.getattr(e.ino)?.size)),
                        _ => {}
                    }
                }
            }
            files.sort();
        } else if a.is_file() {
            files.push((path.to_string(), top, a.size));
        } else {
            return Err(Error::Invalid(format!("{path} is not a regular file or directory")));
        }
        Ok(files)
    }

    /// Entries of a directory, without "." and "..".
    pub fn read_dir(&self, path: &str) -> Result<Vec<DirItem>> {
        let ino = self.resolve(path)?;
        let mut out = Vec::new();
        self.readdir(&Creds::root(), ino, 2, |e| {
            out.push(e);
            true
        })?;
        Ok(out)
    }

    pub fn layout_of(&self, path: &str) -> Result<String> {
        self.layout_get(self.resolve(path)?)
    }

    /// The device extents holding a file's data (and its redundancy):
    /// (device, first block, blocks), in layout order. A file whose data
    /// lives in its meta-data record has none.
    pub fn device_extents_of(&self, path: &str) -> Result<Vec<(u32, u64, u64)>> {
        let node = self.state().inode(self.resolve(path)?)?;
        let d = node.data.read();
        let mut out = Vec::new();
        if let Some(l) = d.layout()? {
            l.extents(&mut |dev, start, len| out.push((dev, start, len)));
        }
        Ok(out)
    }

    pub fn set_layout(&self, path: &str, spec: &str) -> Result<()> {
        self.layout_set(&Creds::root(), self.resolve(path)?, spec)
    }

    /// Creates (or truncates) a file with an optional layout, for writing.
    pub fn create(&self, path: &str, layout: Option<&str>) -> Result<File> {
        let mut o = OpenOptions::new();
        o.read(true).write(true).create(true).truncate(true);
        if let Some(l) = layout {
            o.layout(l);
        }
        self.open_with(path, &o)
    }

    /// Opens an existing file for reading.
    pub fn open_file(&self, path: &str) -> Result<File> {
        self.open_with(path, OpenOptions::new().read(true))
    }

    pub fn open_with(&self, path: &str, o: &OpenOptions) -> Result<File> {
        let root = Creds::root();
        let ino = match self.resolve(path) {
            Ok(ino) => {
                if o.create_new {
                    return Err(Error::Exists(path.to_string()));
                }
                ino
            }
            Err(Error::NotFound(_)) if o.create || o.create_new => {
                let (p, name) = self.parent_of(path)?;
                match self.mknod(&root, p, name, S_IFREG | (o.mode & 0o7777), 0, None, o.layout.as_deref()) {
                    Ok(a) => a.ino,
                    Err(Error::Exists(_)) if !o.create_new => self.resolve(path)?,
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let a = self.getattr(ino)?;
        if a.mode & libc::S_IFMT == S_IFDIR {
            return Err(Error::IsDir(path.to_string()));
        }
        let writable = o.write || o.append;
        // The same rules as an open through the mount.
        let mut flags = match (o.read || !writable, writable) {
            (true, true) => libc::O_RDWR,
            (false, true) => libc::O_WRONLY,
            _ => libc::O_RDONLY,
        };
        if o.truncate && writable {
            flags |= libc::O_TRUNC;
        }
        self.open_as(&root, ino, flags)?;
        self.open_inode(ino)?;
        Ok(File { fs: self.clone(), ino, pos: 0, append: o.append, readable: o.read || !writable, writable })
    }

    /// Writes a whole file (created with `layout` if new).
    pub fn write_file(&self, path: &str, data: &[u8], layout: Option<&str>) -> Result<()> {
        let mut f = self.create(path, layout)?;
        f.write_all_at(data, 0)?;
        Ok(())
    }

    /// Reads a whole file.
    pub fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        let f = self.open_file(path)?;
        let size = f.len()?;
        let mut buf = vec![0u8; size as usize];
        let n = f.read_at(&mut buf, 0)?;
        buf.truncate(n);
        Ok(buf)
    }

    pub fn set_attr_path(&self, path: &str, s: &SetAttr) -> Result<Attr> {
        self.setattr(&Creds::root(), self.resolve(path)?, s)
    }
}

impl File {
    pub fn ino(&self) -> Ino {
        self.ino
    }
    pub fn fs(&self) -> &Fs {
        &self.fs
    }
    pub fn metadata(&self) -> Result<Attr> {
        self.fs.getattr(self.ino)
    }
    pub fn len(&self) -> Result<u64> {
        Ok(self.metadata()?.size)
    }
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Reads at an offset without moving the cursor; safe from many threads.
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> Result<usize> {
        if !self.readable {
            return Err(Error::Access("file not open for reading".into()));
        }
        self.fs.read(self.ino, off, buf)
    }
    /// Fails unless the file was opened for reading.
    pub(crate) fn check_can_read(&self) -> Result<()> {
        if !self.readable {
            return Err(Error::Access("file not open for reading".into()));
        }
        Ok(())
    }
    /// Fails unless the file was opened for writing.
    pub(crate) fn check_can_write(&self) -> Result<()> {
        if !self.writable {
            return Err(Error::Access("file not open for writing".into()));
        }
        Ok(())
    }
    pub fn write_at(&self, data: &[u8], off: u64) -> Result<usize> {
        if !self.writable {
            return Err(Error::Access("file not open for writing".into()));
        }
        self.fs.write(self.ino, off, data)
    }
    pub fn write_all_at(&mut self, data: &[u8], off: u64) -> Result<()> {
        let n = self.write_at(data, off)?;
        debug_assert_eq!(n, data.len());
        Ok(())
    }
    pub fn set_len(&self, size: u64) -> Result<()> {
        if !self.writable {
            return Err(Error::Access("file not open for writing".into()));
        }
        self.fs.truncate(self.ino, size)
    }
    /// Data and meta-data durable.
    pub fn sync_all(&self) -> Result<()> {
        self.fs.fsync(self.ino)
    }
    pub fn sync_data(&self) -> Result<()> {
        self.fs.fsync(self.ino)
    }
    pub fn layout(&self) -> Result<String> {
        self.fs.layout_get(self.ino)
    }
}

impl Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.append {
            self.pos = self.len()?;
        }
        let n = self.write_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for File {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let base = match to {
            SeekFrom::Start(o) => Some(o),
            SeekFrom::End(d) => self.len()?.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = base.ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        Ok(self.pos)
    }
}

impl Drop for File {
    fn drop(&mut self) {
        if let Err(e) = self.fs.release_inode(self.ino) {
            tracing::warn!("closing inode {}: {e}", self.ino);
        }
    }
}
