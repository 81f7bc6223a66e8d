//! POSIX permission checks (owner, group with supplementary groups, other,
//! and a POSIX ACL's named users and groups where the inode has one: see
//! `acl.rs`; root bypasses everything but execute on files with no x bit).

use super::InodeData;

pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

impl Creds {
    pub fn root() -> Self {
        Creds { uid: 0, gid: 0, groups: vec![] }
    }
    pub fn user(uid: u32, gid: u32) -> Self {
        Creds { uid, gid, groups: vec![] }
    }
    /// The credentials of this process.
    pub fn current() -> Self {
        let (uid, gid) = (rustix::process::geteuid().as_raw(), rustix::process::getegid().as_raw());
        Creds { uid, gid, groups: vec![] }
    }
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether `mask` (R|W|X bits) is allowed on `n`.
    pub fn allowed(&self, n: &InodeData, mask: u32) -> bool {
        if self.is_root() {
            // Root may execute only if someone may, or it is a directory.
            return mask & X == 0 || n.is_dir() || n.mode & 0o111 != 0;
        }
        if self.uid == n.uid {
            return (n.mode >> 6) & 7 & mask == mask;
        }
        // As Linux does (acl_permission_check): the ACL is consulted only
        // while the mode's group class (its mask) grants something.
        if n.mode & 0o070 != 0 && !n.xattrs.is_empty() {
            if let Some(v) = n.xattrs.get(super::acl::ACCESS.as_bytes()) {
                // A value that does not decode grants nothing beyond the owner.
                return match super::acl::Acl::decode(v) {
                    Ok(Some(acl)) => acl.permits(self.uid, |g| self.in_group(g), n.gid, mask),
                    Ok(None) => false,
                    Err(_) => false,
                };
            }
        }
        let bits = if self.in_group(n.gid) { (n.mode >> 3) & 7 } else { n.mode & 7 };
        bits & mask == mask
    }

    /// Sticky directories: only the owner of the entry or of the directory
    /// (or root) may remove or rename it.
    pub fn may_delete(&self, dir: &InodeData, victim: &InodeData) -> bool {
        dir.mode & libc::S_ISVTX == 0 || self.is_root() || self.uid == dir.uid || self.uid == victim.uid
    }
}
