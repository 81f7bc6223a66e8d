//! File commands on an unmounted pool: ls, mkdir, put, get, cat, rm, mv, stat.

use crate::util::{
    bytes_bar, chown_to_user, full_time, human, kind_word, mode_string, short_time, CliResult, Context, Fail, Pool,
};
use clap::Args;
use hurricane::dirfile::Dir;
use hurricane::{Attr, Creds, Error, Fs, OpenOptions};
use indicatif::ProgressBar;
use rustix::fs::FileType;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Bytes moved per request when streaming files in and out.
const CHUNK: usize = 1 << 20;

/// Pool paths are absolute; `a/b` means `/a/b`.
pub fn abs(p: &str) -> String {
    if p.starts_with('/') {
        p.to_string()
    } else {
        format!("/{p}")
    }
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

fn base(p: &str) -> &str {
    p.trim_end_matches('/').rsplit('/').next().unwrap_or("")
}

fn out() -> std::io::BufWriter<std::io::StdoutLock<'static>> {
    std::io::BufWriter::with_capacity(CHUNK, std::io::stdout().lock())
}

// ---------------------------------------------------------------- ls

#[derive(Args, Debug)]
pub struct LsArgs {
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    /// Directory or file in the pool (default: /).
    #[arg(default_value = "/")]
    pub path: String,
    /// Long listing: mode, links, owner, size, time, name.
    #[arg(short = 'l', long)]
    pub long: bool,
    /// Include names starting with a dot.
    #[arg(short = 'a', long)]
    pub all: bool,
}

pub fn ls(a: &LsArgs) -> CliResult {
    Pool::run(&a.pool, false, |fs| {
        let path = abs(&a.path);
        let at = fs.lstat(&path)?;
        let mut rows: Vec<(String, Attr)> = Vec::new();
        if at.is_dir() || (at.is_symlink() && fs.stat(&path).is_ok_and(|x| x.is_dir())) {
            for e in fs.read_dir(&path)? {
                let name = String::from_utf8_lossy(&e.name).into_owned();
                if !a.all && name.starts_with('.') {
                    continue;
                }
                rows.push((name, fs.getattr(e.ino)?));
            }
            rows.sort_by(|x, y| x.0.cmp(&y.0));
        } else {
            rows.push((path.clone(), at));
        }
        let mut o = out();
        if !a.long {
            for (name, at) in &rows {
                writeln!(o, "{name}{}", if at.is_dir() { "/" } else { "" })?;
            }
            return Ok(o.flush()?);
        }
        let wl = rows.iter().map(|r| r.1.nlink.to_string().len()).max().unwrap_or(1);
        let ws = rows.iter().map(|r| r.1.size.to_string().len()).max().unwrap_or(1);
        let wu = rows.iter().map(|r| r.1.uid.to_string().len()).max().unwrap_or(1);
        let wg = rows.iter().map(|r| r.1.gid.to_string().len()).max().unwrap_or(1);
        for (name, at) in &rows {
            let target = if at.is_symlink() {
                fs.readlink(at.ino).map(|t| format!(" -> {}", String::from_utf8_lossy(&t))).unwrap_or_default()
            } else {
                String::new()
            };
            let layout = if at.is_file() {
                fs.layout_get(at.ino).map(|l| format!("  [{l}]")).unwrap_or_default()
            } else {
                String::new()
            };
            writeln!(
                o,
                "{} {:>wl$} {:>wu$} {:>wg$} {:>ws$} {} {name}{target}{layout}",
                mode_string(at.mode),
                at.nlink,
                at.uid,
                at.gid,
                at.size,
                short_time(at.mtime)
            )?;
        }
        Ok(o.flush()?)
    })
}

// ---------------------------------------------------------------- mkdir

#[derive(Args, Debug)]
pub struct MkdirArgs {
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    pub path: String,
    /// Make missing parents too; no error if it exists.
    #[arg(short = 'p', long)]
    pub parents: bool,
    /// Permission bits, in octal.
    #[arg(short = 'm', long, value_parser = parse_mode, default_value = "755")]
    pub mode: u32,
}

pub fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{s:?} is not an octal mode (e.g. 755)"))
}

/// Makes a directory owned by the invoking user; with `parents`, every
/// missing one along the path.
fn make_dir(fs: &Fs, path: &str, parents: bool, mode: u32) -> CliResult<u64> {
    let root = Creds::root();
    if !parents {
        let a = fs.mkdir_path(path, mode)?;
        chown_to_user(fs, a.ino)?;
        return Ok(a.ino);
    }
    let mut cur = hurricane::namespace::ROOT;
    let mut sofar = String::new();
    for name in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
        sofar = join(&sofar, name);
        cur = match fs.lookup(&root, cur, name.as_bytes()) {
            Ok(a) if a.is_dir() => a.ino,
            Ok(a) if a.is_symlink() => {
                let t = fs.stat(&sofar)?;
                if !t.is_dir() {
                    return Err(Error::NotDir(sofar).into());
                }
                t.ino
            }
            Ok(_) => return Err(Error::Exists(format!("{sofar} (not a directory)")).into()),
            Err(Error::NotFound(_)) => {
                let a = fs.mkdir(&root, cur, name.as_bytes(), mode)?;
                chown_to_user(fs, a.ino)?;
                a.ino
            }
            Err(e) => return Err(e.into()),
        };
    }
    Ok(cur)
}

pub fn mkdir(a: &MkdirArgs) -> CliResult {
    Pool::run(&a.pool, true, |fs| {
        make_dir(fs, &abs(&a.path), a.parents, a.mode)?;
        Ok(())
    })
}

// ---------------------------------------------------------------- put

#[derive(Args, Debug)]
pub struct PutArgs {
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    /// Local file (or directory, with -r); `-` reads standard input.
    pub local: PathBuf,
    /// Destination in the pool; an existing directory receives LOCAL's name.
    #[arg(default_value = "/")]
    pub path: String,
    /// Layout spec for the new files (default: the directory's, else the
    /// pool's); a table's `map=@FILE` reads its ranges from a local file.
    #[arg(short = 'l', long, value_name = "SPEC", value_parser = crate::util::spec_arg)]
    pub layout: Option<String>,
    /// Copy a local directory and everything beneath it.
    #[arg(short = 'r', long)]
    pub recursive: bool,
}

pub fn put(a: &PutArgs) -> CliResult {
    if let Some(spec) = &a.layout {
        hurricane::layout::parse(spec)?;
    }
    let stdin = a.local.as_os_str() == "-";
    let meta = if stdin { None } else { Some(std::fs::symlink_metadata(&a.local).ctx(a.local.display())?) };
    if meta.as_ref().is_some_and(|m| m.is_dir()) && !a.recursive {
        return Err(Fail::new(format!("{}: is a directory (use -r)", a.local.display())));
    }
    let total = if stdin { 0 } else { local_bytes(&a.local) };
    Pool::run(&a.pool, true, |fs| {
        let mut dest = abs(&a.path);
        let into_dir = a.path.ends_with('/') || fs.stat(&dest).is_ok_and(|x| x.is_dir());
        if into_dir {
            if stdin {
                return Err(Fail::new(format!("{dest}: is a directory: name the file to write from standard input")));
            }
            let name = a
                .local
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .ok_or_else(|| Fail::new(format!("{}: has no file name", a.local.display())))?;
            dest = join(&dest, &name);
        }
        let pb = bytes_bar(total, "put");
        let r = if stdin {
            put_stream(fs, &mut std::io::stdin().lock(), "standard input", &dest, a.layout.as_deref(), 0o644, &pb)
        } else {
            put_tree(fs, &a.local, &dest, a.layout.as_deref(), &pb)
        };
        pb.finish_and_clear();
        r
    })
}

/// Bytes of regular files under a local path (for the progress bar).
fn local_bytes(p: &Path) -> u64 {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => {
            std::fs::read_dir(p).map(|rd| rd.flatten().map(|e| local_bytes(&e.path())).sum()).unwrap_or(0)
        }
        Ok(m) if m.is_file() => m.len(),
        _ => 0,
    }
}

/// The mode bits a copy this command makes keeps of `mode` (a local
/// file's on `put`, a pool file's on `get`): the permission bits, and a
/// directory's sticky bit. Never the set-user-ID and set-group-ID bits:
/// the copy belongs to whoever runs the command (root, often), not to the
/// original's owner, and a set-uid copy of a user's program owned by root
/// would run as root. (cp drops them too when it does not keep ownership;
/// neither `put` nor `get` keeps it.)
pub fn copy_mode(mode: u32, dir: bool) -> u32 {
    mode & if dir { 0o1777 } else { 0o777 }
}

/// Copies the local `local` (as named: a link there is copied as a link)
/// to `dest`. What is below a local directory is reached through the
/// directory's descriptor and never through a link, so a user who can
/// change the tree while root copies it cannot swap a directory or file
/// for a link to one of root's.
fn put_tree(fs: &Fs, local: &Path, dest: &str, layout: Option<&str>, pb: &ProgressBar) -> CliResult {
    let m = std::fs::symlink_metadata(local).ctx(local.display())?;
    let ft = m.file_type();
    if ft.is_dir() {
        let d = Dir::open(local)?;
        put_dir(fs, &d, dest, layout, pb)
    } else if ft.is_symlink() {
        let t = std::fs::read_link(local).ctx(local.display())?;
        put_link(fs, &t, dest)
    } else if ft.is_file() {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(local)
            .ctx(local.display())?;
        put_file(fs, f, &local.display().to_string(), dest, layout, pb)
    } else {
        tracing::warn!("{}: skipped (not a file, directory or symlink)", local.display());
        Ok(())
    }
}

/// [`put_tree`] of the open local directory `d`.
fn put_dir(fs: &Fs, d: &Dir, dest: &str, layout: Option<&str>, pb: &ProgressBar) -> CliResult {
    let m = rustix::fs::fstat(d.fd()).ctx(d.path().display())?;
    match fs.stat(dest) {
        Ok(x) if x.is_dir() => {}
        Ok(_) => return Err(Error::Exists(format!("{dest} (not a directory)")).into()),
        Err(Error::NotFound(_)) => {
            make_dir(fs, dest, false, copy_mode(m.st_mode, true))?;
        }
        Err(e) => return Err(e.into()),
    }
    for name in d.names()? {
        let path = d.path().join(&name);
        let to = join(dest, &name.to_string_lossy());
        let Some(st) = d.lstat(&name)? else { continue };
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => put_dir(fs, &d.subdir(&name)?, &to, layout, pb)?,
            FileType::Symlink => put_link(fs, Path::new(&d.readlink(&name)?), &to)?,
            FileType::RegularFile => put_file(fs, d.open_read(&name)?, &path.display().to_string(), &to, layout, pb)?,
            _ => tracing::warn!("{}: skipped (not a file, directory or symlink)", path.display()),
        }
    }
    Ok(())
}

fn put_link(fs: &Fs, target: &Path, dest: &str) -> CliResult {
    if fs.lstat(dest).is_ok() {
        fs.remove(dest)?;
    }
    let a = fs.symlink_path(&target.to_string_lossy(), dest)?;
    chown_to_user(fs, a.ino)
}

/// Copies the open local file `f` (which must be a regular file: it was
/// opened without following a link, and is asked what it is) to `dest`.
fn put_file(
    fs: &Fs,
    mut f: std::fs::File,
    name: &str,
    dest: &str,
    layout: Option<&str>,
    pb: &ProgressBar,
) -> CliResult {
    let m = f.metadata().ctx(name)?;
    if !m.is_file() {
        tracing::warn!("{name}: skipped (not a file, directory or symlink)");
        return Ok(());
    }
    put_stream(fs, &mut f, name, dest, layout, copy_mode(m.mode(), false), pb)
}

/// Streams `src` into a new (or truncated) pool file in 1 MiB chunks. On
/// failure the partial file is removed, so a full pool keeps nothing half-written.
fn put_stream(
    fs: &Fs,
    src: &mut dyn Read,
    src_name: &str,
    dest: &str,
    layout: Option<&str>,
    mode: u32,
    pb: &ProgressBar,
) -> CliResult {
    let named = |e: hurricane::Error| match e {
        // Engine messages that do not name the file get its path.
        Error::Layout(_) | Error::NoSpace(_) | Error::Device(_) | Error::Corrupt { .. } => {
            Fail::new(format!("{dest}: {e}"))
        }
        e => Fail::from(e),
    };
    let existed = match fs.stat(dest) {
        Ok(x) if x.is_dir() => return Err(Error::IsDir(dest.to_string()).into()),
        Ok(x) => Some(x),
        Err(_) => None,
    };
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(true).mode(mode);
    if let Some(l) = layout {
        o.layout(l);
    }
    let mut f = o.open(fs, dest).map_err(named)?;
    if let Some(old) = existed {
        if old.size > 0 {
            // Make the old data's space reusable before writing the new.
            fs.sync()?;
        }
        if let Some(l) = layout {
            fs.layout_set(&Creds::root(), f.ino(), l).map_err(named)?;
        }
    }
    if existed.is_none() {
        chown_to_user(fs, f.ino())?;
    }
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    let r: CliResult = (|| loop {
        let n = read_full(src, &mut buf).map_err(|e| Fail::new(format!("reading {src_name}: {e}")))?;
        if n == 0 {
            return Ok(());
        }
        f.write_all_at(&buf[..n], off).map_err(named)?;
        off += n as u64;
        pb.inc(n as u64);
    })();
    if let Err(mut e) = r {
        let ino = f.ino();
        drop(f);
        // Only a file this put made is removed; an overwritten one stays (truncated).
        if existed.is_none() && fs.resolve(dest).is_ok_and(|i| i == ino) {
            match fs.remove(dest) {
                Ok(()) => e.msg.push_str(" (the partial file was removed)"),
                Err(e2) => tracing::warn!("{dest}: could not remove the partial file: {e2}"),
            }
        }
        return Err(e);
    }
    Ok(())
}

/// Reads until `buf` is full or the input ends.
fn read_full(src: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match src.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

// ---------------------------------------------------------------- get / cat

#[derive(Args, Debug)]
pub struct GetArgs {
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    /// File (or directory, with -r) in the pool.
    pub path: String,
    /// Local destination; an existing directory receives PATH's name; `-` is standard output.
    pub local: PathBuf,
    /// Copy a directory and everything beneath it.
    #[arg(short = 'r', long)]
    pub recursive: bool,
}

pub fn get(a: &GetArgs) -> CliResult {
    Pool::run(&a.pool, false, |fs| {
        let path = abs(&a.path);
        let at = fs.stat(&path)?;
        if a.local.as_os_str() == "-" {
            let mut o = out();
            copy_out(fs, &path, &mut o, &ProgressBar::hidden())?;
            return Ok(o.flush()?);
        }
        if at.is_dir() && !a.recursive {
            return Err(Error::IsDir(format!("{path} (use -r)")).into());
        }
        let pb = bytes_bar(if at.is_dir() { pool_bytes(fs, &path) } else { at.size }, "get");
        let r = match local_dir(&a.local)? {
            // An existing directory receives PATH's name; the pool's root
            // fills it.
            Some(d) if path == "/" => get_dir(fs, &path, &d, &pb),
            Some(d) => get_tree(fs, &path, &d, OsStr::new(base(&path)), true, &pb),
            None => {
                let (d, name) = Dir::split(&a.local)?;
                get_tree(fs, &path, &d, &name, true, &pb)
            }
        };
        pb.finish_and_clear();
        r
    })
}

fn pool_bytes(fs: &Fs, path: &str) -> u64 {
    match fs.lstat(path) {
        Ok(a) if a.is_dir() => fs
            .read_dir(path)
            .map(|es| es.iter().map(|e| pool_bytes(fs, &join(path, &String::from_utf8_lossy(&e.name)))).sum())
            .unwrap_or(0),
        Ok(a) if a.is_file() => a.size,
        _ => 0,
    }
}

/// Whether a link owned by `uid` is one `get` follows at the destination
/// the caller named: one the caller (or root) made, not one another user
/// may have planted there.
fn trusted(uid: u32) -> bool {
    uid == 0 || uid == crate::util::owner().0
}

/// The message for a link at `p` owned by `uid` that is not followed.
fn untrusted_link(p: &Path, uid: u32) -> Fail {
    Fail::new(format!(
        "{}: a symbolic link owned by uid {uid}: not followed (remove it, or name where it leads)",
        p.display()
    ))
}

/// LOCAL opened, when it is an existing directory, or a link to one that
/// the caller or root owns.
fn local_dir(local: &Path) -> CliResult<Option<Dir>> {
    let Ok(m) = std::fs::symlink_metadata(local) else { return Ok(None) };
    let is_dir = m.is_dir() || (m.file_type().is_symlink() && trusted(m.uid()) && local.is_dir());
    Ok(if is_dir { Some(Dir::open(local)?) } else { None })
}

/// Copies the pool path `path` to `name` in the local directory `dir`.
/// Every name is reached through its directory's descriptor and none
/// through a link: where the copy of a file goes, a link (or a file) found
/// there is replaced, never written through; where a directory goes, a
/// link is refused. Only at the top (`top`: the destination the caller
/// named) is a link followed, and only one the caller or root owns, as cp
/// would write through it (`/dev/stdout`, a link of one's own); a link
/// that another user owns is refused there. A file is made with
/// `O_CREAT | O_EXCL`, private until it is whole, then given the pool
/// file's permission bits without its set-id bits ([`copy_mode`]).
fn get_tree(fs: &Fs, path: &str, dir: &Dir, name: &OsStr, top: bool, pb: &ProgressBar) -> CliResult {
    let at = fs.lstat(path)?;
    let dest = dir.path().join(name);
    let found = dir.lstat(name)?;
    let kind = found.as_ref().map(|st| FileType::from_raw_mode(st.st_mode));
    let link_uid = found.as_ref().filter(|_| kind == Some(FileType::Symlink)).map(|st| st.st_uid);
    if at.is_dir() {
        let sub = match kind {
            None => {
                // Private while it fills.
                dir.mkdir(name, 0o700)?;
                dir.subdir(name)?
            }
            Some(FileType::Directory) => dir.subdir(name)?,
            Some(FileType::Symlink) if top && link_uid.is_some_and(trusted) && dest.is_dir() => Dir::open(&dest)?,
            Some(FileType::Symlink) if top => return Err(untrusted_link(&dest, link_uid.unwrap_or(0))),
            Some(FileType::Symlink) => {
                return Err(Fail::new(format!(
                    "{}: a symbolic link where a directory goes: not followed (remove it)",
                    dest.display()
                )))
            }
            Some(_) => return Err(Error::Exists(format!("{} (not a directory)", dest.display())).into()),
        };
        get_dir(fs, path, &sub, pb)
    } else if at.is_symlink() {
        let t = fs.readlink(at.ino)?;
        if kind == Some(FileType::Directory) {
            return Err(Error::IsDir(dest.display().to_string()).into());
        }
        dir.remove(name)?;
        Ok(dir.symlink(OsStr::from_bytes(&t), name)?)
    } else if at.is_file() {
        let mut f = match kind {
            None => dir.create_new(name, 0o600)?,
            Some(FileType::Directory) => return Err(Error::IsDir(dest.display().to_string()).into()),
            Some(FileType::Symlink) if top && link_uid.is_some_and(trusted) => std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&dest)
                .ctx(dest.display())?,
            Some(FileType::Symlink) if top => return Err(untrusted_link(&dest, link_uid.unwrap_or(0))),
            // A device or FIFO the caller or root made (`/dev/null`):
            // written to, as cp would.
            Some(FileType::CharacterDevice | FileType::BlockDevice | FileType::Fifo)
                if top && found.as_ref().is_some_and(|st| trusted(st.st_uid)) =>
            {
                std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&dest)
                    .ctx(dest.display())?
            }
            // A file (perhaps another user's, or a hard link to one) or a
            // link is replaced.
            Some(_) => {
                dir.remove(name)?;
                dir.create_new(name, 0o600)?
            }
        };
        copy_out(fs, path, &mut f, pb)?;
        if f.metadata().ctx(dest.display())?.is_file() {
            f.sync_all().ctx(dest.display())?;
            // Through the descriptor: no name is looked up again. (A file
            // of another user's that a link of the caller's leads to may
            // refuse: it keeps its mode, as before this copy.)
            let _ = f.set_permissions(std::fs::Permissions::from_mode(copy_mode(at.mode, false)));
        }
        Ok(())
    } else {
        tracing::warn!("{path}: skipped (a special file)");
        Ok(())
    }
}

/// Fills the local directory `d` with the pool directory `path`'s
/// entries, then gives it `path`'s permission bits ([`copy_mode`]) where
/// it may (an existing directory of another user's keeps its own).
fn get_dir(fs: &Fs, path: &str, d: &Dir, pb: &ProgressBar) -> CliResult {
    for e in fs.read_dir(path)? {
        let name = String::from_utf8_lossy(&e.name).into_owned();
        get_tree(fs, &join(path, &name), d, OsStr::new(&name), false, pb)?;
    }
    let mode = copy_mode(fs.lstat(path)?.mode, true);
    let _ = rustix::fs::fchmod(d.fd(), rustix::fs::Mode::from_raw_mode(mode));
    Ok(())
}

/// Streams a pool file to `w` in 1 MiB chunks.
fn copy_out(fs: &Fs, path: &str, w: &mut dyn Write, pb: &ProgressBar) -> CliResult {
    let f = fs.open_file(path)?;
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    loop {
        let n = f.read_at(&mut buf, off)?;
        if n == 0 {
            return Ok(());
        }
        w.write_all(&buf[..n])?;
        off += n as u64;
        pb.inc(n as u64);
    }
}

#[derive(Args, Debug)]
pub struct CatArgs {
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    /// Files in the pool, written one after another.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

pub fn cat(a: &CatArgs) -> CliResult {
    Pool::run(&a.pool, false, |fs| {
        let mut o = out();
        for p in &a.paths {
            copy_out(fs, &abs(p), &mut o, &ProgressBar::hidden())?;
        }
        Ok(o.flush()?)
    })
}

// ---------------------------------------------------------------- rm / mv

#[derive(Args, Debug)]
pub struct RmArgs {
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    #[arg(required = true)]
    pub paths: Vec<String>,
    /// Remove directories and everything beneath them.
    #[arg(short = 'r', long)]
    pub recursive: bool,
    /// No error for missing paths.
    #[arg(short = 'f', long)]
    pub force: bool,
}

pub fn rm(a: &RmArgs) -> CliResult {
    Pool::run(&a.pool, true, |fs| {
        for p in &a.paths {
            let path = abs(p);
            if path.trim_end_matches('/').is_empty() {
                return Err(Fail::new("refusing to remove /"));
            }
            match fs.lstat(&path) {
                Err(Error::NotFound(_)) if a.force => continue,
                Err(e) => return Err(e.into()),
                Ok(at) if at.is_dir() && !a.recursive => return Err(Error::IsDir(format!("{path} (use -r)")).into()),
                Ok(_) => remove_tree(fs, &path)?,
            }
        }
        Ok(())
    })
}

fn remove_tree(fs: &Fs, path: &str) -> CliResult {
    if fs.lstat(path)?.is_dir() {
        for e in fs.read_dir(path)? {
            remove_tree(fs, &join(path, &String::from_utf8_lossy(&e.name)))?;
        }
    }
    Ok(fs.remove(path)?)
}

#[derive(Args, Debug)]
pub struct MvArgs {
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    pub from: String,
    /// New name; an existing directory receives FROM's name.
    pub to: String,
}

pub fn mv(a: &MvArgs) -> CliResult {
    Pool::run(&a.pool, true, |fs| {
        let from = abs(&a.from);
        let mut to = abs(&a.to);
        let src = fs.lstat(&from)?;
        if let Ok(t) = fs.stat(&to) {
            if t.is_dir() && t.ino != src.ino {
                to = join(&to, base(&from));
            }
        }
        Ok(fs.rename_path(&from, &to)?)
    })
}

// ---------------------------------------------------------------- stat

#[derive(Args, Debug)]
pub struct StatArgs {
    #[arg(value_parser = crate::util::pool_arg)]
    pub pool: PathBuf,
    #[arg(required = true)]
    pub paths: Vec<String>,
}

pub fn stat(a: &StatArgs) -> CliResult {
    Pool::run(&a.pool, false, |fs| {
        let mut o = out();
        for p in &a.paths {
            let path = abs(p);
            let at = fs.lstat(&path)?;
            let link = if at.is_symlink() {
                format!(" -> {}", String::from_utf8_lossy(&fs.readlink(at.ino)?))
            } else {
                String::new()
            };
            writeln!(o, "  File: {path}{link}")?;
            writeln!(o, "  Type: {:<16} Inode: {}", kind_word(at.mode), at.ino)?;
            writeln!(o, "  Size: {:<16} Blocks: {:<10} IO Block: {}", at.size, at.blocks, at.blksize)?;
            writeln!(
                o,
                "  Mode: {:04o} ({})   Links: {}   Uid: {}   Gid: {}",
                at.mode & 0o7777,
                mode_string(at.mode),
                at.nlink,
                at.uid,
                at.gid
            )?;
            writeln!(o, "Access: {}", full_time(at.atime))?;
            writeln!(o, "Modify: {}", full_time(at.mtime))?;
            writeln!(o, "Change: {}", full_time(at.ctime))?;
            writeln!(o, " Birth: {}", full_time(at.btime))?;
            if at.is_file() {
                writeln!(o, "Layout: {}", fs.layout_get(at.ino)?)?;
                writeln!(o, "  Used: {} on devices", human(at.blocks * 512))?;
            } else if at.is_dir() {
                let own = fs.dir_layout_get(at.ino)?;
                if own.is_empty() {
                    writeln!(o, "Layout: {} (default for new files: the pool's)", fs.layout_get(at.ino)?)?;
                } else {
                    writeln!(o, "Layout: {own} (default for new files)")?;
                }
            }
        }
        Ok(o.flush()?)
    })
}
