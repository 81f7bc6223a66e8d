//! Regrouping (C-FFS 2.3.4, group maintenance): a file whose nodes keep
//! some of its blocks together (`colocate`: the first group's worth, in
//! the group of its directory or owner) can end up with them scattered,
//! after it grew in steps while other files took the blocks beside it, or
//! after it was renamed into another directory and grew there. Regrouping
//! moves those blocks back together, into the group of the file's key now
//! (its directory as [`Fs::origin`] sees it: the one it was last reached
//! through), through the nodes' own placement.
//!
//! Which blocks are out of place is the node's to say
//! ([`crate::blocks::Block::scattered`]); they move through
//! [`crate::blocks::Block::relocate`], as the log cleaner moves blocks
//! (`clean.rs`): under the file's I/O lock held exclusively and in one
//! journal group, exactly as a write would move them. The blocks left
//! behind are freed when that group commits.

use super::Fs;
use crate::error::Result;
use crate::journal::{Ino, NodeRecord, Op};
use parking_lot::Mutex;

impl Fs {
    /// Moves the blocks `ino`'s nodes keep apart from where they would
    /// place them together into place (module docs); returns the blocks
    /// moved (0: nothing was scattered). What it moves is in the journal
    /// group it logs; the old space is free once that commits.
    pub fn regroup(&self, ino: Ino) -> Result<u64> {
        self.check_writable()?;
        let node = self.state().inode(ino)?;
        let _io = node.io.write();
        let Some(lay) = node.data.read().layout()?.cloned() else { return Ok(0) };
        let todo: Vec<_> =
            lay.nodes().iter().map(|n| (n, n.scattered())).filter(|(_, runs)| !runs.is_empty()).collect();
        if todo.is_empty() {
            return Ok(0);
        }
        let changes = Mutex::new(Vec::new());
        let sink = |c: NodeRecord| changes.lock().push(c);
        let g = self.inner.gate.enter();
        let io = self.writer_io(ino, g.epoch(), &sink, false);
        let mut moved = 0;
        let mut r = Ok(());
        'nodes: for (n, runs) in todo {
            for (fblk, pblk, len) in runs {
                match n.relocate(&io, fblk, pblk, len) {
                    Ok(m) => moved += m,
                    Err(e) => {
                        r = Err(e);
                        break 'nodes;
                    }
                }
            }
        }
        // What moved before a failure stands: it is recorded.
        let ops: Vec<Op> =
            std::mem::take(&mut *changes.lock()).into_iter().map(|change| Op::Map { ino, change }).collect();
        if !ops.is_empty() {
            self.log(&g, &ops);
        }
        r.map(|()| moved)
    }
}
