//! Logical meta-data operations: the journal's records and the only way the
//! meta-data state changes. The live path and replay both go through
//! `namespace::State::apply`, so what is replayed is exactly what was done.
//!
//! Every op is idempotent given the state it was applied to, or absolute
//! (sets rather than adds), because a checkpoint may already contain an op
//! that is replayed again after it.

pub use crate::base::Ino;
use crate::codec::{Decoder, Encoder};
use crate::error::Result;

/// A change one node of a file's layout made to its persistent state: the
/// node's preorder id and the record its block type wrote (the type's record
/// version byte, then the type's own encoding). The journal carries it
/// without knowing the type; `blocks::Layout::apply` checks the version and
/// hands the rest to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    pub node: u32,
    pub bytes: Vec<u8>,
}

/// Attributes of a new inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInode {
    pub ino: Ino,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub time: i64,
    /// Encoded layout tree for regular files (empty otherwise).
    pub layout: Vec<u8>,
    /// Symlink target.
    pub target: Vec<u8>,
    /// Parent of a new directory.
    pub parent: Ino,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Create(NewInode),
    /// Adds `name` in `dir` for `ino`; counts the link.
    Link {
        dir: Ino,
        name: Vec<u8>,
        ino: Ino,
        time: i64,
    },
    /// Removes `name` from `dir`; uncounts the link.
    Unlink {
        dir: Ino,
        name: Vec<u8>,
        time: i64,
    },
    /// Moves (or with `exchange`, swaps) an entry; an existing target is unlinked.
    Rename {
        sdir: Ino,
        sname: Vec<u8>,
        ddir: Ino,
        dname: Vec<u8>,
        exchange: bool,
        time: i64,
    },
    /// Drops an inode with no links and no open handles.
    Free {
        ino: Ino,
    },
    SetAttr {
        ino: Ino,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime: Option<i64>,
        mtime: Option<i64>,
        ctime: i64,
    },
    SetSize {
        ino: Ino,
        size: u64,
        mtime: i64,
    },
    /// A change to the state of one node of a file's layout.
    Map {
        ino: Ino,
        change: NodeRecord,
    },
    SetXattr {
        ino: Ino,
        name: Vec<u8>,
        value: Vec<u8>,
        time: i64,
    },
    RemoveXattr {
        ino: Ino,
        name: Vec<u8>,
        time: i64,
    },
    /// Replaces a file's (empty) layout tree.
    SetLayout {
        ino: Ino,
        layout: Vec<u8>,
    },
    /// Default layout for files created under a directory ("" = inherit).
    SetDirLayout {
        ino: Ino,
        spec: String,
    },
    /// Lazy time updates, gathered when a batch commits.
    Times {
        ino: Ino,
        atime: i64,
        mtime: i64,
        ctime: i64,
    },
    /// File blocks `[start, start + blocks)` of `ino` that the group wrote
    /// without ordered mode's flush: when the record is the journal's last
    /// (written in verified mode), recovery reads them back through the
    /// file's checksums and drops the record if they fail. No effect on
    /// the state.
    Verify {
        ino: Ino,
        start: u64,
        blocks: u64,
    },
    /// Where the head of plain writes to the `log`s of device `dev` (with
    /// `seg`-block segments) stood when the batch was taken: the next piece
    /// at `next` in the run ending at `end`, then the run
    /// [then_start, then_start + then_len) (none when `then_len` is 0),
    /// each behind a summary carrying `nonce`. Roll-forward (`Fs::open`)
    /// walks from the last one of each head. No effect on the state.
    LogHead {
        dev: u32,
        seg: u64,
        next: u64,
        end: u64,
        then_start: u64,
        then_len: u64,
        nonce: u64,
    },
}

fn opt(e: &mut Encoder, v: Option<u64>) {
    match v {
        Some(x) => e.u8(1).u64(x),
        None => e.u8(0),
    };
}
fn dopt(d: &mut Decoder) -> Result<Option<u64>> {
    Ok(match d.u8()? {
        0 => None,
        _ => Some(d.u64()?),
    })
}

impl Op {
    /// The one inode an op names directly (every op but those on directory
    /// entries: create, link, unlink, rename).
    pub fn inode(&self) -> Option<Ino> {
        match self {
            Op::Free { ino }
            | Op::SetAttr { ino, .. }
            | Op::SetSize { ino, .. }
            | Op::Map { ino, .. }
            | Op::SetXattr { ino, .. }
            | Op::RemoveXattr { ino, .. }
            | Op::SetLayout { ino, .. }
            | Op::SetDirLayout { ino, .. }
            | Op::Times { ino, .. }
            | Op::Verify { ino, .. } => Some(*ino),
            Op::Create(_) | Op::Link { .. } | Op::Unlink { .. } | Op::Rename { .. } | Op::LogHead { .. } => None,
        }
    }

    pub fn encode(&self, e: &mut Encoder) {
        match self {
            Op::Create(n) => {
                e.u8(1).u64(n.ino).u32(n.mode).u32(n.uid).u32(n.gid).u32(n.rdev).i64(n.time);
                e.bytes(&n.layout).bytes(&n.target).u64(n.parent);
            }
            Op::Link { dir, name, ino, time } => {
                e.u8(2).u64(*dir).bytes(name).u64(*ino).i64(*time);
            }
            Op::Unlink { dir, name, time } => {
                e.u8(3).u64(*dir).bytes(name).i64(*time);
            }
            Op::Rename { sdir, sname, ddir, dname, exchange, time } => {
                e.u8(4).u64(*sdir).bytes(sname).u64(*ddir).bytes(dname).u8(*exchange as u8).i64(*time);
            }
            Op::Free { ino } => {
                e.u8(5).u64(*ino);
            }
            Op::SetAttr { ino, mode, uid, gid, atime, mtime, ctime } => {
                e.u8(6).u64(*ino);
                opt(e, mode.map(u64::from));
                opt(e, uid.map(u64::from));
                opt(e, gid.map(u64::from));
                opt(e, atime.map(|t| t as u64));
                opt(e, mtime.map(|t| t as u64));
                e.i64(*ctime);
            }
            Op::SetSize { ino, size, mtime } => {
                e.u8(7).u64(*ino).u64(*size).i64(*mtime);
            }
            Op::Map { ino, change } => {
                e.u8(8).u64(*ino).u32(change.node).bytes(&change.bytes);
            }
            Op::SetXattr { ino, name, value, time } => {
                e.u8(9).u64(*ino).bytes(name).bytes(value).i64(*time);
            }
            Op::RemoveXattr { ino, name, time } => {
                e.u8(10).u64(*ino).bytes(name).i64(*time);
            }
            Op::SetLayout { ino, layout } => {
                e.u8(11).u64(*ino).bytes(layout);
            }
            Op::SetDirLayout { ino, spec } => {
                e.u8(12).u64(*ino).str(spec);
            }
            Op::Times { ino, atime, mtime, ctime } => {
                e.u8(13).u64(*ino).i64(*atime).i64(*mtime).i64(*ctime);
            }
            Op::Verify { ino, start, blocks } => {
                e.u8(14).u64(*ino).u64(*start).u64(*blocks);
            }
            Op::LogHead { dev, seg, next, end, then_start, then_len, nonce } => {
                e.u8(15).u32(*dev).u64(*seg).u64(*next).u64(*end).u64(*then_start).u64(*then_len).u64(*nonce);
            }
        }
    }

    pub fn decode(d: &mut Decoder) -> Result<Op> {
        let u32o = |v: Option<u64>| v.map(|x| x as u32);
        Ok(match d.u8()? {
            1 => Op::Create(NewInode {
                ino: d.u64()?,
                mode: d.u32()?,
                uid: d.u32()?,
                gid: d.u32()?,
                rdev: d.u32()?,
                time: d.i64()?,
                layout: d.bytes()?.to_vec(),
                target: d.bytes()?.to_vec(),
                parent: d.u64()?,
            }),
            2 => Op::Link { dir: d.u64()?, name: d.bytes()?.to_vec(), ino: d.u64()?, time: d.i64()? },
            3 => Op::Unlink { dir: d.u64()?, name: d.bytes()?.to_vec(), time: d.i64()? },
            4 => Op::Rename {
                sdir: d.u64()?,
                sname: d.bytes()?.to_vec(),
                ddir: d.u64()?,
                dname: d.bytes()?.to_vec(),
                exchange: d.u8()? != 0,
                time: d.i64()?,
            },
            5 => Op::Free { ino: d.u64()? },
            6 => Op::SetAttr {
                ino: d.u64()?,
                mode: u32o(dopt(d)?),
                uid: u32o(dopt(d)?),
                gid: u32o(dopt(d)?),
                atime: dopt(d)?.map(|t| t as i64),
                mtime: dopt(d)?.map(|t| t as i64),
                ctime: d.i64()?,
            },
            7 => Op::SetSize { ino: d.u64()?, size: d.u64()?, mtime: d.i64()? },
            8 => Op::Map { ino: d.u64()?, change: NodeRecord { node: d.u32()?, bytes: d.bytes()?.to_vec() } },
            9 => Op::SetXattr { ino: d.u64()?, name: d.bytes()?.to_vec(), value: d.bytes()?.to_vec(), time: d.i64()? },
            10 => Op::RemoveXattr { ino: d.u64()?, name: d.bytes()?.to_vec(), time: d.i64()? },
            11 => Op::SetLayout { ino: d.u64()?, layout: d.bytes()?.to_vec() },
            12 => Op::SetDirLayout { ino: d.u64()?, spec: d.str()?.to_string() },
            13 => Op::Times { ino: d.u64()?, atime: d.i64()?, mtime: d.i64()?, ctime: d.i64()? },
            14 => Op::Verify { ino: d.u64()?, start: d.u64()?, blocks: d.u64()? },
            15 => {
                let (dev, seg, next, end) = (d.u32()?, d.u64()?, d.u64()?, d.u64()?);
                let (then_start, then_len, nonce) = (d.u64()?, d.u64()?, d.u64()?);
                if seg == 0 || next > end || then_start.checked_add(then_len).is_none() {
                    return Err(d.err(format!("log head {next}..{end} (segment {seg}) is impossible")));
                }
                Op::LogHead { dev, seg, next, end, then_start, then_len, nonce }
            }
            t => return Err(d.err(format!("unknown op tag {t}"))),
        })
    }
}
