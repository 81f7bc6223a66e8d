//! `hurricane layout get|set`: on a pool directory through the engine, or on
//! a mounted path through the `user.hurricane.*` extended attributes.

use crate::files::abs;
use crate::util::{CliResult, Fail, Pool};
use clap::{Args, Subcommand};
use hurricane::{xattr, Error, OpenOptions};
use std::path::{Path, PathBuf};

#[derive(Subcommand, Debug)]
pub enum LayoutCmd {
    /// Print a file's layout (a directory: the default for new files).
    /// `layout get POOL_DIR PATH`, or `layout get MOUNTED_PATH`.
    Get(GetArgs),
    /// Give an empty (or new) file a layout, or a directory a default; with
    /// --migrate, move a file holding data to the layout while it stays in
    /// use. `layout set POOL_DIR PATH SPEC`, or `layout set MOUNTED_PATH SPEC`.
    Set(SetArgs),
    /// List every block type with its parameters (kind, range, default).
    Types,
}

/// The block types, from the engine's registry (for `layout types` and the
/// layout commands' help).
pub fn types_text() -> String {
    hurricane::blocks::registry::describe(hurricane::blocks::TYPES)
}

/// Help shown after the layout commands' usage.
pub fn help() -> String {
    format!(
        "Layout specs: name[(k=v,...)][[child,...]][@dev], e.g. stripe(unit=64K,width=3); \
sizes take K, M, G, T.\n\nBlock types:\n{}",
        types_text()
    )
}

#[derive(Args, Debug)]
pub struct GetArgs {
    /// POOL_DIR PATH, or a path on a mounted pool.
    #[arg(num_args = 1..=2, required = true, value_names = ["POOL_DIR|MOUNTED_PATH", "PATH"])]
    pub args: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct SetArgs {
    /// POOL_DIR PATH SPEC, or MOUNTED_PATH SPEC.
    #[arg(num_args = 2..=3, required = true, value_names = ["POOL_DIR|MOUNTED_PATH", "PATH", "SPEC"])]
    pub args: Vec<String>,
    /// A file holding data is moved to the new layout, online (see
    /// `hurricane migrate`).
    #[arg(long)]
    pub migrate: bool,
}

pub fn run(c: &LayoutCmd) -> CliResult {
    match c {
        LayoutCmd::Get(a) => match a.args.as_slice() {
            [pool, path] => get_pool(&crate::util::pool_arg(&pool.to_string_lossy())?, &path.to_string_lossy()),
            [mounted] => get_mounted(mounted),
            _ => Err(Fail::code(2, "layout get takes POOL_DIR PATH, or MOUNTED_PATH")),
        },
        LayoutCmd::Set(a) => match a.args.as_slice() {
            [pool, path, spec] => {
                set_pool(&crate::util::pool_arg(pool)?, path, &crate::util::spec_arg(spec)?, a.migrate)
            }
            [mounted, spec] => set_mounted(Path::new(mounted), &crate::util::spec_arg(spec)?, a.migrate),
            _ => Err(Fail::code(2, "layout set takes POOL_DIR PATH SPEC, or MOUNTED_PATH SPEC")),
        },
        LayoutCmd::Types => {
            print!("{}", types_text());
            Ok(())
        }
    }
}

fn get_pool(pool: &Path, path: &str) -> CliResult {
    Pool::run(pool, false, |fs| {
        println!("{}", fs.layout_of(&abs(path))?);
        Ok(())
    })
}

const HOLDS_DATA: &str = "already holds data: add --migrate to move it to the new layout \
                          (without it, only the read policy of replicate nodes changes in place)";

/// Sets the layout of an empty file or the default of a directory; a
/// missing file is created empty with the layout (like `lfs setstripe`).
/// With `migrate`, a file holding data moves to it.
fn set_pool(pool: &Path, path: &str, spec: &str, migrate: bool) -> CliResult {
    // Syntax and types first: the message points at the column.
    hurricane::layout::parse(spec)?;
    Pool::run(pool, true, |fs| {
        let path = abs(path);
        match fs.stat(&path) {
            Ok(a) if a.is_dir() => fs.set_layout(&path, spec)?,
            Ok(a) if a.is_file() && a.size > 0 && migrate => {
                let pb = crate::util::bytes_bar(a.size, "migrate");
                let opts = hurricane::fs::MigrateOptions::default();
                fs.migrate_path(&path, spec, &opts, &|p| {
                    pb.set_length(p.total_bytes);
                    pb.set_position(p.done_bytes);
                })?;
                pb.finish_and_clear();
            }
            Ok(a) if a.is_file() && a.size > 0 && !fs.layout_changes_in_place(&path, spec)? => {
                return Err(Fail::new(format!("{path}: {HOLDS_DATA}")))
            }
            // On a file holding data the engine takes only what can change
            // in place (a replicate read policy).
            Ok(a) if a.is_file() => fs.set_layout(&path, spec).map_err(|e| match e {
                Error::Invalid(_) if a.size > 0 => Fail::new(format!("{path}: {HOLDS_DATA}")),
                e => e.into(),
            })?,
            Ok(_) => return Err(Error::Invalid(format!("{path}: not a regular file or directory")).into()),
            Err(Error::NotFound(_)) => {
                let f = OpenOptions::new().write(true).create_new(true).layout(spec).open(fs, &path)?;
                crate::util::chown_to_user(fs, f.ino())?;
            }
            Err(e) => return Err(e.into()),
        }
        println!("{}", fs.layout_of(&path)?);
        Ok(())
    })
}

fn is_dir(p: &Path) -> CliResult<bool> {
    std::fs::metadata(p).map(|m| m.is_dir()).map_err(|e| Fail::new(format!("{}: {e}", p.display())))
}

/// The migration under way on a mounted file, as its mount reports it.
fn migration_of(p: &Path) -> Option<String> {
    let mut buf = vec![0u8; 64 << 10];
    let n = rustix::fs::getxattr(p, xattr::MIGRATION, &mut buf[..]).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

fn get_mounted(p: &Path) -> CliResult {
    let dir = is_dir(p)?;
    let name = if dir { xattr::DIR_LAYOUT } else { xattr::LAYOUT };
    let mut buf = vec![0u8; 4096];
    loop {
        let e = match rustix::fs::getxattr(p, name, &mut buf[..]) {
            Ok(n) => {
                buf.truncate(n);
                let s = String::from_utf8_lossy(&buf);
                println!("{}", s.trim_end_matches(['\0', '\n']));
                if let Some(m) = migration_of(p) {
                    println!("{m}");
                }
                return Ok(());
            }
            Err(e) => std::io::Error::from(e),
        };
        match e.raw_os_error() {
            Some(libc::ERANGE) if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            Some(libc::ENODATA) if dir => {
                eprintln!("hurricane: {}: no default layout of its own (new files get the pool's)", p.display());
                return Ok(());
            }
            Some(libc::ENODATA) | Some(libc::ENOTSUP) => {
                return Err(Fail::new(format!(
                    "{}: no Hurricane layout (is it on a mounted Hurricane pool?)",
                    p.display()
                )))
            }
            _ => return Err(Fail::new(format!("{}: {e}", p.display()))),
        }
    }
}

fn set_mounted(p: &Path, spec: &str, migrate: bool) -> CliResult {
    // The mount can only answer EINVAL: check what can be checked here.
    hurricane::layout::parse(spec)?;
    let meta = std::fs::metadata(p).map_err(|e| Fail::new(format!("{}: {e}", p.display())))?;
    let name = if meta.is_dir() { xattr::DIR_LAYOUT } else { xattr::LAYOUT };
    let holds_data = meta.is_file() && meta.len() > 0;
    if holds_data && !migrate && !same_but_read_policy(spec) {
        return Err(Fail::new(format!("{}: {HOLDS_DATA}", p.display())));
    }
    // A migration answers once the file is on its new layout: its progress
    // is read meanwhile.
    let set = std::thread::scope(|s| {
        let h = s.spawn(|| rustix::fs::setxattr(p, name, spec.as_bytes(), rustix::fs::XattrFlags::empty()));
        if holds_data {
            let pb = crate::util::bytes_bar(meta.len(), "migrate");
            while !h.is_finished() {
                if let Some(m) = migration_of(p) {
                    pb.set_message(m);
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            pb.finish_and_clear();
        }
        h.join().unwrap_or(Err(rustix::io::Errno::IO))
    });
    if let Err(e) = set {
        let e = std::io::Error::from(e);
        if holds_data && e.raw_os_error() == Some(libc::EINVAL) {
            return Err(Fail::new(format!("{}: {HOLDS_DATA}", p.display())));
        }
        let why = match e.raw_os_error() {
            Some(libc::EINVAL) => why_refused(p, spec).unwrap_or_else(|| {
                format!("the pool refused layout {spec:?} (device numbers, widths or sizes do not fit this pool)")
            }),
            Some(libc::ENOTSUP) => "not on a mounted Hurricane pool".to_string(),
            _ => e.to_string(),
        };
        return Err(Fail::new(format!("{}: {why}", p.display())));
    }
    get_mounted(p)
}

/// Whether `spec` may be a change of read policy alone, which a file
/// holding data takes in place (the mount decides; a spec that changes
/// more moves the data, which needs --migrate).
fn same_but_read_policy(spec: &str) -> bool {
    spec.contains("read=")
}

/// The mount answers only EINVAL: find its pool (the FUSE mount's source)
/// and resolve the spec against that pool's device count for the reason.
fn why_refused(p: &Path, spec: &str) -> Option<String> {
    let path = std::fs::canonicalize(p).ok()?;
    let m = hurricane_fuse::mountinfo::mounts()
        .into_iter()
        .filter(|m| m.is_fuse() && path.starts_with(&m.mount_point))
        .max_by_key(|m| m.mount_point.as_os_str().len())?;
    let n = hurricane::pool::device_paths(Path::new(&m.source)).ok()?.len();
    let info = hurricane::layout::PoolInfo::new(vec![u64::MAX / 2; n]);
    let parsed = hurricane::layout::parse(spec).ok()?;
    hurricane::layout::resolve(&parsed, &info).err().map(|e| e.to_string())
}
