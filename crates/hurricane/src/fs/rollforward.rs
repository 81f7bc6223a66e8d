//! Roll-forward: after replay, the plain writes to `log` files that reached
//! the disk after the journal's last record are found through the logs'
//! segment summaries (`blocks/log/summary.rs`) and written again, so that a
//! crash loses no write that the disk had, synced or not.
//!
//! Each head of plain writes has its place recorded in every batch that
//! moved it (`Op::LogHead`); the walk starts from the last one replay saw
//! and follows the chain of summaries until a block is not the next one or
//! its data does not match. The pieces found, from every device, are then
//! applied in the order they were placed, each through its file's whole
//! layout (so checksums, copies and the other children see it as any
//! write), as of the committed meta-data:
//! - the file must still be there (inode numbers are never reused) and not
//!   be protected for transactions (whose writes count only through their
//!   commit records);
//! - the summary's node must be a `log` of the same device and segment size
//!   in the file's layout now, reached from the root through nodes that map
//!   each of their blocks to one block of the child ([`Block::parent_block`]);
//! - only bytes inside the file's committed size are written: a size, like
//!   every other meta-data change, comes from the journal alone.
//!
//! A piece that fails these tests is left out; the pieces after it are
//! still applied. The writes are committed before the pool is used,
//! together with an empty place for every head walked (so no later open
//! walks those chains again), and the blocks the walk held are given back. While they are held they count as
//! a log head's unused blocks: a checkpoint taken by that commit records
//! them free, as the journal's state has them, so a crash during
//! roll-forward leaves the same chain for the next open to walk.

use super::Fs;
use crate::base::BLOCK_SIZE;
use crate::blocks::log::{walk, Anchor, Found, LogSpace};
use crate::blocks::Block;
use crate::error::Result;
use crate::journal::Op;
use std::sync::Arc;

/// What roll-forward did, for the open report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RolledForward {
    /// Pieces found after the anchors.
    pub found: usize,
    /// Pieces written again, and their blocks.
    pub applied: usize,
    pub blocks: u64,
}

/// Blocks written at once.
const STEP: u64 = 256;

impl Fs {
    /// Walks every anchor's chain and applies what it finds (see the
    /// module's text); a read-only pool only counts what it finds.
    pub(super) fn roll_forward(&self, anchors: &[Anchor]) -> Result<RolledForward> {
        let storage = self.storage();
        let mut found: Vec<Found> = Vec::new();
        for a in anchors {
            let (Some(dev), Some(alloc)) = (storage.devs.get(a.dev as usize), storage.allocs.get(a.dev as usize))
            else {
                continue;
            };
            if !dev.state().readable() {
                continue;
            }
            let mut held = Vec::new();
            found.extend(walk(dev, alloc, a, &mut held));
            LogSpace::of(dev).hold(&held);
        }
        found.sort_by_key(|f| f.sum.order);
        let mut out = RolledForward { found: found.len(), ..Default::default() };
        let res = (|| -> Result<()> {
            if self.inner.read_only {
                return Ok(());
            }
            for f in &found {
                match self.apply_piece(f) {
                    Ok(0) => {}
                    Ok(n) => {
                        out.applied += 1;
                        out.blocks += n;
                    }
                    // The pool opens all the same: the piece was never
                    // synced, and the others do not depend on it.
                    Err(e) => tracing::warn!(
                        "roll-forward: inode {} blocks {}+{} on device {} not written again: {e}",
                        f.sum.ino,
                        f.sum.fblk,
                        f.sum.len,
                        f.dev
                    ),
                }
            }
            // The chains walked are done with: the journal says so before
            // their blocks go back to the free map, so no later open walks
            // them again (their blocks may hold anything by then, and a
            // piece left out now, for a file that did not exist, could
            // land in a file made later under its number). An empty run
            // at each anchor ends every walk at once; a head that moves
            // records its own place after it.
            let ends: Vec<Op> = anchors
                .iter()
                .map(|a| Op::LogHead { dev: a.dev, seg: a.seg, next: 0, end: 0, then_start: 0, then_len: 0, nonce: 0 })
                .collect();
            let g = self.inner.gate.enter();
            self.log(&g, &ends);
            drop(g);
            self.commit_all()
        })();
        for (dev, alloc) in storage.devs.iter().zip(&storage.allocs) {
            if let Some(space) = dev.shared_if::<LogSpace>() {
                space.release_held(alloc);
            }
        }
        res.map(|()| out)
    }

    /// Writes one piece again through its file; returns the blocks written
    /// (0 when the piece is left out).
    fn apply_piece(&self, f: &Found) -> Result<u64> {
        let s = &f.sum;
        let Some(node) = self.state().get(s.ino) else { return Ok(0) };
        let (lay, size) = {
            let d = node.data.read();
            match d.layout() {
                Ok(Some(l)) if !super::txn::protected(&d) => (l.clone(), d.size),
                _ => return Ok(0),
            }
        };
        let Some(leaf) = lay.nodes().get(s.node as usize) else { return Ok(0) };
        let seg_bytes = match leaf.params().0.get("segment") {
            Some(crate::blocks::Value::Num(n)) => Some(*n),
            _ => None,
        };
        if leaf.kind().name != "log" || leaf.device() != Some(f.dev) || seg_bytes != Some(s.seg * BLOCK_SIZE as u64) {
            return Ok(0);
        }
        let Some(path) = path_to(lay.root(), s.node) else { return Ok(0) };
        let dev = &self.storage().devs[f.dev as usize];
        let blocks_in_size = size.div_ceil(BLOCK_SIZE as u64);
        // Runs of (file block, node block) that follow each other.
        let mut runs: Vec<(u64, u64, u64)> = Vec::new();
        for b in s.fblk..s.fblk + s.len {
            let Some(fb) = file_block(&path, b) else { continue };
            if fb >= blocks_in_size {
                continue;
            }
            match runs.last_mut() {
                Some((rf, rb, rl)) if *rf + *rl == fb && *rb + *rl == b => *rl += 1,
                _ => runs.push((fb, b, 1)),
            }
        }
        let mut written = 0;
        let mut buf = Vec::new();
        for (fb, b, l) in runs {
            let mut done = 0;
            while done < l {
                let k = (l - done).min(STEP);
                buf.resize(k as usize * BLOCK_SIZE, 0);
                dev.read_blocks(f.at + 1 + (b + done - s.fblk), &mut buf)?;
                let off = (fb + done) * BLOCK_SIZE as u64;
                let bytes = (size - off).min(buf.len() as u64) as usize;
                self.write(s.ino, off, &buf[..bytes])?;
                done += k;
                written += k;
            }
        }
        Ok(written)
    }
}

/// The file block that block `b` of the node at the end of `path` holds,
/// through every node above it; None when a node on the way keeps no
/// one-to-one map.
fn file_block(path: &[(Arc<dyn Block>, usize)], b: u64) -> Option<u64> {
    let mut blk = b;
    for (parent, child) in path.iter().rev() {
        blk = parent.parent_block(*child, blk)?;
    }
    Some(blk)
}

/// The nodes from the root down to node `id`, each with the index of the
/// child the path takes (empty when `id` is the root).
fn path_to(n: &Arc<dyn Block>, id: u32) -> Option<Vec<(Arc<dyn Block>, usize)>> {
    if n.id() == id {
        return Some(Vec::new());
    }
    for (i, c) in n.children().iter().enumerate() {
        if let Some(mut p) = path_to(c, id) {
            p.insert(0, (n.clone(), i));
            return Some(p);
        }
    }
    None
}
