//! Inode flags (`chattr`/`lsattr`, the `FS_IOC_GETFLAGS` and
//! `FS_IOC_SETFLAGS` ioctls): immutable, append-only, nodump, noatime.
//!
//! They are kept in the inode's extended attributes under [`XATTR`], a
//! name no caller may read, list, set or remove, as a little-endian
//! `u32` of the kernel's `FS_*_FL` bits; an inode without it has none.
//! The checks below are the engine's, made for every front end: Linux's
//! rules (`may_delete`, `may_open`, `notify_change`, `vfs_fallocate`).

use super::InodeData;
use crate::error::{Error, Result};

/// The extended attribute the flags are kept in.
pub const XATTR: &str = "system.hurricane.flags";

/// No change to the file's data, attributes, names or links.
pub const IMMUTABLE: u32 = 0x10;
/// Writes only at the end; no truncate, no removal or renaming.
pub const APPEND: u32 = 0x20;
/// Left out by dump(8); kept, not acted on.
pub const NODUMP: u32 = 0x40;
/// Reads do not change the access time.
pub const NOATIME: u32 = 0x80;

/// Every flag an inode may have.
pub const ALL: u32 = IMMUTABLE | APPEND | NODUMP | NOATIME;
/// Flags only a caller with CAP_LINUX_IMMUTABLE (root) may set or clear.
pub const PRIVILEGED: u32 = IMMUTABLE | APPEND;

/// `struct fsxattr`'s flag bits for the same four.
pub const XFLAG_IMMUTABLE: u32 = 0x8;
pub const XFLAG_APPEND: u32 = 0x10;
pub const XFLAG_NOATIME: u32 = 0x40;
pub const XFLAG_NODUMP: u32 = 0x80;

const XFLAGS: [(u32, u32); 4] =
    [(IMMUTABLE, XFLAG_IMMUTABLE), (APPEND, XFLAG_APPEND), (NODUMP, XFLAG_NODUMP), (NOATIME, XFLAG_NOATIME)];

/// The flags of an inode. A stored value this engine did not write (wrong
/// length, unknown bits) gives the bits it knows of the first four bytes.
pub fn of(d: &InodeData) -> u32 {
    if d.xattrs.is_empty() {
        return 0;
    }
    match d.xattrs.get(XATTR.as_bytes()) {
        Some(v) => decode(v),
        None => 0,
    }
}

/// The flags in a stored value.
pub fn decode(v: &[u8]) -> u32 {
    v.first_chunk::<4>().map_or(0, |b| u32::from_le_bytes(*b) & ALL)
}

pub fn encode(flags: u32) -> Vec<u8> {
    (flags & ALL).to_le_bytes().to_vec()
}

/// The `fsxattr` flag bits of inode flags.
pub fn to_xflags(flags: u32) -> u32 {
    XFLAGS.iter().filter(|(f, _)| flags & f != 0).fold(0, |x, (_, b)| x | b)
}

/// The inode flags of `fsxattr` flag bits; `Err` with the bits that have
/// no inode flag here.
pub fn from_xflags(x: u32) -> std::result::Result<u32, u32> {
    let known = XFLAGS.iter().fold(0, |k, (_, b)| k | b);
    if x & !known != 0 {
        return Err(x & !known);
    }
    Ok(XFLAGS.iter().filter(|(_, b)| x & b != 0).fold(0, |f, (fl, _)| f | fl))
}

fn named(what: &str, ino: u64, flag: &str) -> Error {
    Error::Perm(format!("{what} of inode {ino}, which is {flag}"))
}

/// The file's data, attributes or extended attributes may change.
pub fn check_change(d: &InodeData, ino: u64, what: &str) -> Result<()> {
    let f = of(d);
    if f & IMMUTABLE != 0 {
        return Err(named(what, ino, "immutable"));
    }
    if f & APPEND != 0 {
        return Err(named(what, ino, "append-only"));
    }
    Ok(())
}

/// The inode may be written, or (a directory) have entries added.
pub fn check_write(d: &InodeData, ino: u64, what: &str) -> Result<()> {
    if of(d) & IMMUTABLE != 0 {
        return Err(named(what, ino, "immutable"));
    }
    Ok(())
}

/// An entry of directory `dir` naming an inode with flags `victim` may be
/// removed or replaced (or renamed away): neither may be immutable, nor
/// append-only.
pub fn check_delete(dir: &InodeData, dir_ino: u64, victim: u32, ino: u64) -> Result<()> {
    check_change(dir, dir_ino, "removal of an entry")?;
    if victim & IMMUTABLE != 0 {
        return Err(named("removal", ino, "immutable"));
    }
    if victim & APPEND != 0 {
        return Err(named("removal", ino, "append-only"));
    }
    Ok(())
}

/// A write of `len` bytes at `off` to a file of `size` bytes.
pub fn check_data_write(d: &InodeData, ino: u64, off: u64) -> Result<()> {
    let f = of(d);
    if f & IMMUTABLE != 0 {
        return Err(named("write", ino, "immutable"));
    }
    if f & APPEND != 0 && off < d.size {
        return Err(named(&format!("write at {off} (before the end, {})", d.size), ino, "append-only"));
    }
    Ok(())
}

/// An open with these flags.
pub fn check_open(d: &InodeData, ino: u64, open_flags: i32) -> Result<()> {
    let f = of(d);
    let writes = open_flags & libc::O_ACCMODE != libc::O_RDONLY || open_flags & libc::O_TRUNC != 0;
    if f & IMMUTABLE != 0 && writes {
        return Err(named("open for writing", ino, "immutable"));
    }
    if f & APPEND != 0 && (open_flags & libc::O_TRUNC != 0 || (writes && open_flags & libc::O_APPEND == 0)) {
        return Err(named("open for writing other than O_APPEND", ino, "append-only"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xflags_map_both_ways() {
        for f in [IMMUTABLE, APPEND, NODUMP, NOATIME, ALL, 0] {
            assert_eq!(from_xflags(to_xflags(f)), Ok(f));
        }
        assert_eq!(from_xflags(0x1), Err(0x1));
        assert_eq!(decode(&[0xff, 0xff, 0xff, 0xff]), ALL);
        assert_eq!(decode(&[0x10]), 0);
    }
}
