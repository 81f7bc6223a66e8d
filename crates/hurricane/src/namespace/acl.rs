//! POSIX access control lists (`system.posix_acl_access` and
//! `system.posix_acl_default`): their on-the-wire format, the access check
//! and what chmod, a new ACL and a creation do with them, as Linux does
//! (fs/posix_acl.c).
//!
//! An ACL is kept as the value of its extended attribute, in the format the
//! kernel passes through `getxattr`/`setxattr` (`posix_acl_xattr`): a
//! little-endian `u32` version (2), then one 8-byte entry per ACL entry,
//! `u16` tag, `u16` permission bits, `u32` user or group id (the kernel's
//! `ACL_UNDEFINED_ID`, `u32::MAX`, for entries that name nobody). Every
//! value is decoded with [`Acl::decode`], which checks it as the kernel's
//! `posix_acl_valid` does: whatever the bytes, a refusal, never a panic.
//!
//! The mode and the access ACL stay in step: the owner, group and other
//! permission bits of the mode are the ACL's owner entry, mask entry (its
//! owning group entry when it has no mask) and other entry.

use crate::error::{Error, Result};

/// The attribute of a file's access ACL.
pub const ACCESS: &str = "system.posix_acl_access";
/// The attribute of a directory's default ACL (what its new entries get).
pub const DEFAULT: &str = "system.posix_acl_default";

/// The format version of an ACL attribute.
pub const VERSION: u32 = 2;

pub const USER_OBJ: u16 = 0x01;
pub const USER: u16 = 0x02;
pub const GROUP_OBJ: u16 = 0x04;
pub const GROUP: u16 = 0x08;
pub const MASK: u16 = 0x10;
pub const OTHER: u16 = 0x20;

/// The id of an entry that names nobody (owner, owning group, mask, other).
pub const UNDEFINED_ID: u32 = u32::MAX;

/// Most entries an ACL may have: as many as fit the largest attribute
/// value the kernel passes (a page, 4 KiB) after the header.
pub const MAX_ENTRIES: usize = (4096 - 4) / 8;

const RWX: u16 = 7;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub tag: u16,
    pub perm: u16,
    pub id: u32,
}

/// A valid ACL: one owner, owning group and other entry, and a mask where
/// it names anyone, in the kernel's order of tags (`posix_acl_valid`, which
/// leaves the order of named entries among themselves alone; the first
/// entry naming a caller is the one that counts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<Entry>,
}

fn bad(why: impl Into<String>) -> Error {
    Error::Invalid(format!("POSIX ACL: {}", why.into()))
}

impl Acl {
    /// Decodes and checks an ACL attribute's value. `Ok(None)`: a value
    /// with no entries, which the kernel takes as no ACL at all.
    pub fn decode(value: &[u8]) -> Result<Option<Acl>> {
        let Some((head, rest)) = value.split_first_chunk::<4>() else {
            return Err(bad(format!("{} bytes is shorter than its header", value.len())));
        };
        let version = u32::from_le_bytes(*head);
        if version != VERSION {
            return Err(bad(format!("version {version} (only {VERSION} is known)")));
        }
        if !rest.len().is_multiple_of(8) {
            return Err(bad(format!("{} bytes of entries is not a whole number of entries", rest.len())));
        }
        if rest.is_empty() {
            return Ok(None);
        }
        if rest.len() / 8 > MAX_ENTRIES {
            return Err(bad(format!("{} entries (at most {MAX_ENTRIES})", rest.len() / 8)));
        }
        let entries = rest
            .chunks_exact(8)
            .map(|c| Entry {
                tag: u16::from_le_bytes([c[0], c[1]]),
                perm: u16::from_le_bytes([c[2], c[3]]),
                id: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        Acl::new(entries).map(Some)
    }

    /// An ACL of these entries, checked (the ids of entries that name
    /// nobody are set to [`UNDEFINED_ID`]).
    pub fn new(mut entries: Vec<Entry>) -> Result<Acl> {
        // Each tag's rank in the order the entries must come in.
        let rank = |t: u16| match t {
            USER_OBJ => Some(0),
            USER => Some(1),
            GROUP_OBJ => Some(2),
            GROUP => Some(3),
            MASK => Some(4),
            OTHER => Some(5),
            _ => None,
        };
        let mut prev: Option<&Entry> = None;
        let (mut named, mut mask) = (false, false);
        let mut seen = [0u32; 6];
        for e in entries.iter_mut() {
            let r = rank(e.tag).ok_or_else(|| bad(format!("unknown tag {:#x}", e.tag)))?;
            if e.perm & !RWX != 0 {
                return Err(bad(format!("permission bits {:#x}", e.perm)));
            }
            if let Some(p) = prev {
                let pr = rank(p.tag).unwrap_or(0);
                let in_order = pr < r || (pr == r && matches!(e.tag, USER | GROUP));
                if !in_order {
                    return Err(bad("entries out of order or repeated"));
                }
            }
            seen[r] += 1;
            match e.tag {
                // (-1 is no user or group: the kernel cannot map it.)
                USER | GROUP if e.id == UNDEFINED_ID => return Err(bad("a named entry without an id")),
                USER | GROUP => named = true,
                MASK => mask = true,
                _ => e.id = UNDEFINED_ID,
            }
            if e.tag == MASK {
                e.id = UNDEFINED_ID;
            }
            prev = Some(e);
        }
        if seen[0] != 1 || seen[2] != 1 || seen[5] != 1 {
            return Err(bad("an ACL needs one owner, one owning group and one other entry"));
        }
        if named && !mask {
            return Err(bad("named users or groups without a mask entry"));
        }
        Ok(Acl { entries })
    }

    /// The ACL equivalent to a mode's permission bits.
    pub fn from_mode(mode: u32) -> Acl {
        let p = |shift: u32| ((mode >> shift) & 7) as u16;
        Acl {
            entries: vec![
                Entry { tag: USER_OBJ, perm: p(6), id: UNDEFINED_ID },
                Entry { tag: GROUP_OBJ, perm: p(3), id: UNDEFINED_ID },
                Entry { tag: OTHER, perm: p(0), id: UNDEFINED_ID },
            ],
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The attribute value.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(4 + 8 * self.entries.len());
        v.extend_from_slice(&VERSION.to_le_bytes());
        for e in &self.entries {
            v.extend_from_slice(&e.tag.to_le_bytes());
            v.extend_from_slice(&e.perm.to_le_bytes());
            v.extend_from_slice(&e.id.to_le_bytes());
        }
        v
    }

    fn find(&self, tag: u16) -> Option<usize> {
        self.entries.iter().position(|e| e.tag == tag)
    }

    /// Whether the ACL says no more than a mode (no named entries, no mask).
    pub fn is_minimal(&self) -> bool {
        self.entries.iter().all(|e| matches!(e.tag, USER_OBJ | GROUP_OBJ | OTHER))
    }

    /// The permission bits of `mode` made to agree with the ACL (the
    /// kernel's `posix_acl_equiv_mode`): owner, mask (or owning group)
    /// and other entries; the bits above them are kept.
    pub fn mode_of(&self, mode: u32) -> u32 {
        let mut m = mode & !0o777;
        let mut group = 0;
        for e in &self.entries {
            let p = u32::from(e.perm);
            match e.tag {
                USER_OBJ => m |= p << 6,
                GROUP_OBJ if self.find(MASK).is_none() => group = p,
                MASK => group = p,
                OTHER => m |= p,
                _ => {}
            }
        }
        m | group << 3
    }

    /// chmod: the owner, mask (or owning group) and other entries take the
    /// new mode's bits (`posix_acl_chmod`).
    pub fn chmod(&mut self, mode: u32) {
        let class = if self.find(MASK).is_some() { MASK } else { GROUP_OBJ };
        for e in self.entries.iter_mut() {
            match e.tag {
                USER_OBJ => e.perm = ((mode >> 6) & 7) as u16,
                OTHER => e.perm = (mode & 7) as u16,
                t if t == class => e.perm = ((mode >> 3) & 7) as u16,
                _ => {}
            }
        }
    }

    /// A new inode's access ACL from its directory's default ACL and the
    /// mode it was created with (`posix_acl_create_masq`): each class keeps
    /// what both allow. Returns the mode and the ACL, `None` where the
    /// result says no more than the mode.
    pub fn create(&self, mode: u32) -> (u32, Option<Acl>) {
        let mut acl = self.clone();
        let mut m = mode & 0o777;
        let class = if acl.find(MASK).is_some() { MASK } else { GROUP_OBJ };
        for e in acl.entries.iter_mut() {
            match e.tag {
                USER_OBJ => {
                    e.perm &= ((m >> 6) & 7) as u16;
                    m = (m & !0o700) | (u32::from(e.perm) << 6);
                }
                OTHER => {
                    e.perm &= (m & 7) as u16;
                    m = (m & !0o007) | u32::from(e.perm);
                }
                t if t == class => {
                    e.perm &= ((m >> 3) & 7) as u16;
                    m = (m & !0o070) | (u32::from(e.perm) << 3);
                }
                _ => {}
            }
        }
        let mode = (mode & !0o777) | m;
        (mode, (!acl.is_minimal()).then_some(acl))
    }

    /// Whether a caller who is not the owner gets `want` (R|W|X bits)
    /// through the ACL's named users, groups and other entry
    /// (`posix_acl_permission`), the mask applied to all but the other
    /// entry. `uid` and `in_group` are the caller's.
    pub fn permits(&self, uid: u32, in_group: impl Fn(u32) -> bool, owner_gid: u32, want: u32) -> bool {
        let want = want as u16 & RWX;
        let mask = self.find(MASK).map_or(RWX, |i| self.entries[i].perm);
        let masked = |p: u16| p & mask & want == want;
        let mut found = false;
        for e in &self.entries {
            match e.tag {
                USER if e.id == uid => return masked(e.perm),
                GROUP_OBJ | GROUP => {
                    let id = if e.tag == GROUP_OBJ { owner_gid } else { e.id };
                    if in_group(id) {
                        if masked(e.perm) {
                            return true;
                        }
                        found = true;
                    }
                }
                OTHER => return !found && e.perm & want == want,
                _ => {}
            }
        }
        false
    }
}

/// Whether `name` is one of the two ACL attributes.
pub fn is_acl_name(name: &[u8]) -> bool {
    name == ACCESS.as_bytes() || name == DEFAULT.as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(tag: u16, perm: u16, id: u32) -> Entry {
        Entry { tag, perm, id }
    }

    /// user::rw-, user:1000:rwx, group::r--, group:50:rw-, mask::rw-, other::---
    fn sample() -> Acl {
        Acl::new(vec![
            e(USER_OBJ, 6, 0),
            e(USER, 7, 1000),
            e(GROUP_OBJ, 4, 0),
            e(GROUP, 6, 50),
            e(MASK, 6, 0),
            e(OTHER, 0, 0),
        ])
        .unwrap()
    }

    #[test]
    fn an_acl_round_trips_through_its_attribute_value() {
        let a = sample();
        let v = a.encode();
        assert_eq!(v.len(), 4 + 6 * 8);
        assert_eq!(&v[..4], &[2, 0, 0, 0]);
        assert_eq!(Acl::decode(&v).unwrap(), Some(a));
        // A header alone is no ACL at all.
        assert_eq!(Acl::decode(&2u32.to_le_bytes()).unwrap(), None);
    }

    #[test]
    fn hostile_values_are_refused() {
        let good = sample().encode();
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            vec![2, 0, 0],
            // Wrong version.
            [&[1u8, 0, 0, 0][..], &good[4..]].concat(),
            // A partial entry.
            good[..good.len() - 3].to_vec(),
            // Unknown tag, stray permission bits.
            [&good[..4], &[0x40, 0, 7, 0, 0, 0, 0, 0][..]].concat(),
            [&good[..4], &[1, 0, 8, 0, 0, 0, 0, 0][..], &good[12..]].concat(),
            // No other entry; no owner entry.
            good[..good.len() - 8].to_vec(),
            [&good[..4], &good[12..]].concat(),
        ];
        for c in &cases {
            assert!(matches!(Acl::decode(c), Err(Error::Invalid(_))), "{c:?}");
        }
        // A named entry naming nobody; named entries without a mask.
        let mk = |v: Vec<Entry>| Acl::new(v);
        let base = |named: Vec<Entry>, mask: bool| {
            let mut v = vec![e(USER_OBJ, 7, 0)];
            v.extend(named);
            v.push(e(GROUP_OBJ, 5, 0));
            if mask {
                v.push(e(MASK, 7, 0));
            }
            v.push(e(OTHER, 0, 0));
            v
        };
        assert!(mk(base(vec![e(USER, 7, UNDEFINED_ID)], true)).is_err());
        assert!(mk(base(vec![e(USER, 7, 3)], false)).is_err());
        // As the kernel does, named entries may come in any order.
        assert!(mk(base(vec![e(USER, 7, 9), e(USER, 7, 3)], true)).is_ok());
        assert!(mk(base(vec![e(USER, 7, 3), e(USER, 7, 4)], true)).is_ok());
        // Too many entries for a page.
        let mut big = 2u32.to_le_bytes().to_vec();
        big.resize(4 + 8 * (MAX_ENTRIES + 1), 0);
        assert!(Acl::decode(&big).is_err());
    }

    #[test]
    fn the_access_check_masks_named_entries_and_the_owning_group() {
        let a = sample();
        let none = |_: u32| false;
        // Named user 1000: rwx masked to rw-.
        assert!(a.permits(1000, none, 100, 4 | 2));
        assert!(!a.permits(1000, none, 100, 1));
        // Owning group (gid 100): r--.
        assert!(a.permits(7, |g| g == 100, 100, 4));
        assert!(!a.permits(7, |g| g == 100, 100, 2));
        // Named group 50: rw-; a member of both groups gets the union.
        assert!(a.permits(7, |g| g == 50 || g == 100, 100, 2));
        // A matching group entry that does not grant denies, rather than
        // falling through to other.
        let open_other = Acl::new(vec![e(USER_OBJ, 6, 0), e(GROUP_OBJ, 0, 0), e(OTHER, 4, 0)]).unwrap();
        assert!(!open_other.permits(7, |g| g == 100, 100, 4));
        assert!(open_other.permits(7, none, 100, 4));
        // Others: ---.
        assert!(!a.permits(7, none, 100, 4));
    }

    #[test]
    fn chmod_and_mode_stay_in_step_through_the_mask() {
        let mut a = sample();
        assert_eq!(a.mode_of(libc::S_IFREG | 0o4000), libc::S_IFREG | 0o4660);
        a.chmod(0o751);
        assert_eq!(a.mode_of(0), 0o751);
        // The named user's entry is kept, the mask took the group bits.
        assert!(a.entries().contains(&e(USER, 7, 1000)));
        assert!(a.entries().contains(&e(MASK, 5, UNDEFINED_ID)));
        assert!(a.entries().contains(&e(GROUP_OBJ, 4, UNDEFINED_ID)));
        // Without a mask, the owning group's entry takes them.
        let mut m = Acl::from_mode(0o640);
        m.chmod(0o604);
        assert_eq!(m, Acl::from_mode(0o604));
    }

    #[test]
    fn creation_masks_the_default_acl_by_the_mode() {
        let a = sample();
        let (mode, acl) = a.create(libc::S_IFREG | 0o644);
        // owner rw- & rw-, mask rw- & r--, other --- & r--.
        assert_eq!(mode, libc::S_IFREG | 0o640);
        let acl = acl.unwrap();
        assert!(acl.entries().contains(&e(MASK, 4, UNDEFINED_ID)));
        assert!(acl.entries().contains(&e(USER, 7, 1000)));
        // A default ACL with no named entries gives the mode only.
        let (mode, acl) = Acl::from_mode(0o750).create(0o777);
        assert_eq!((mode, acl), (0o750, None));
    }
}
