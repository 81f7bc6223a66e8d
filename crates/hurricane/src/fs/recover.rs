//! Recovery's check of a journal record written in verified mode
//! (`journal::Order::Verified`): the record went to the disk together with
//! the data its ops point at, under one flush, so a crash during that
//! flush can leave the record durable and some of the data not. Such a
//! record was never acknowledged (its commit waits for the flush), and the
//! committer writes no record before the previous one's flush returned, so
//! only the journal's last record can be in that state.
//!
//! The record's groups name every range they wrote (`Op::Verify`), and only
//! files whose every block is read against a checksum are written this way
//! (`txn.rs`). Each range is read back through a copy of its file's layout
//! advanced by the record's own changes (the state the record leads to, not
//! yet applied): a block that fails its checksum means the data did not all
//! arrive, and the record is dropped whole. A range that cannot be read for
//! another reason (a missing device) proves nothing either way; the record
//! is kept, as ordered mode would have.

use crate::base::BLOCK_SIZE;
use crate::blocks::{probing_checksums, IoCtx, Layout, NodeRecord};
use crate::codec::Decoder;
use crate::error::{Error, Result};
use crate::journal::{Ino, Op};
use crate::namespace::State;
use crate::pool::Storage;
use std::collections::{BTreeMap, BTreeSet};

/// Blocks read back per request.
const STEP: u64 = 256;

/// Whether the data the record's `Verify` ops name is on the disk as the
/// record says. `groups` are the record's decoded groups; `state` is the
/// meta-data as every earlier record left it.
pub(super) fn data_arrived(state: &State, storage: &Storage, groups: &[Vec<Op>]) -> Result<bool> {
    let mut ranges: BTreeMap<Ino, Vec<(u64, u64)>> = BTreeMap::new();
    let mut freed = BTreeSet::new();
    for op in groups.iter().flatten() {
        match op {
            Op::Verify { ino, start, blocks } => ranges.entry(*ino).or_default().push((*start, *blocks)),
            // Its blocks may be written over once the record commits: a
            // read would prove nothing.
            Op::Free { ino } => {
                freed.insert(*ino);
            }
            _ => {}
        }
    }
    for (ino, runs) in ranges {
        if freed.contains(&ino) {
            continue;
        }
        let Some(lay) = layout_after(state, ino, groups)? else { continue };
        let sink = |_: NodeRecord| {};
        let io =
            IoCtx { owner: ino, origin: crate::blocks::Origin::NONE, storage, epoch: 0, sink: &sink, repair: false };
        let mut buf = Vec::new();
        for (start, blocks) in runs {
            let mut at = start;
            let end = start.saturating_add(blocks).min(lay.root().capacity());
            while at < end {
                let n = (end - at).min(STEP);
                buf.resize(n as usize * BLOCK_SIZE, 0);
                match probing_checksums(|| lay.root().read(&io, at, &mut buf)) {
                    Ok(()) => {}
                    Err(Error::Checksum(why)) => {
                        tracing::info!("inode {ino}: {why}");
                        return Ok(false);
                    }
                    Err(e) => {
                        tracing::warn!(
                            "inode {ino}: blocks {at}+{n} of the last journal record could not be read back ({e}); \
                             the record is kept"
                        );
                    }
                }
                at += n;
            }
        }
    }
    Ok(true)
}

/// A private copy of file `ino`'s layout as the record leaves it: the
/// state's tree (or the one the record creates or installs), with the
/// record's changes to it applied. `None`: not a file.
fn layout_after(state: &State, ino: Ino, groups: &[Vec<Op>]) -> Result<Option<Layout>> {
    let decode = |bytes: &[u8]| Layout::decode(&mut Decoder::new(bytes, "journal: layout"));
    let mut lay = match state.get(ino) {
        Some(n) => match n.data.read().layout()? {
            Some(l) => {
                let mut e = crate::codec::Encoder::new();
                l.encode(&mut e);
                Some(decode(&e.into_inner())?)
            }
            None => None,
        },
        None => None,
    };
    for op in groups.iter().flatten() {
        match op {
            Op::Create(n) if n.ino == ino && !n.layout.is_empty() => lay = Some(decode(&n.layout)?),
            Op::SetLayout { ino: i, layout } if *i == ino => lay = Some(decode(layout)?),
            Op::Map { ino: i, change } if *i == ino => {
                if let Some(l) = &lay {
                    l.apply(change)?;
                }
            }
            _ => {}
        }
    }
    Ok(lay)
}
