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
use crate::error::{Error, Result};
use crate::journal::{Ino, NodeRecord, Op};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Progress of a tree's regrouping.
#[derive(Debug, Clone, Copy, Default)]
pub struct RegroupProgress {
    pub files_done: u64,
    pub files_total: u64,
    /// Files whose blocks moved, and the blocks moved.
    pub regrouped: u64,
    pub moved_blocks: u64,
}

/// What a tree's regrouping did.
#[derive(Debug, Clone, Default)]
pub struct RegroupReport {
    /// Regular files looked at.
    pub files: u64,
    /// Of those, files whose scattered blocks were moved together.
    pub regrouped: u64,
    pub moved_blocks: u64,
    /// Every file was looked at (not stopped).
    pub complete: bool,
    pub duration: Duration,
}

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

    /// Regroups `path`, or with `recursive` every regular file under it
    /// (module docs): the files whose nodes keep blocks apart have them
    /// moved together, the others are left as they are. Stops between
    /// files when `stop` is set (`complete` false); a file removed
    /// meanwhile is skipped.
    pub fn regroup_tree(
        &self,
        path: &str,
        recursive: bool,
        stop: Option<&Arc<AtomicBool>>,
        progress: &dyn Fn(&RegroupProgress),
    ) -> Result<RegroupReport> {
        self.check_writable()?;
        let t0 = Instant::now();
        let files = self.regular_files(path, recursive, "regroup")?;
        let mut p = RegroupProgress { files_total: files.len() as u64, ..Default::default() };
        progress(&p);
        let mut report = RegroupReport::default();
        for (path, ino, _) in files {
            if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
                report.duration = t0.elapsed();
                return Ok(report);
            }
            match self.regroup(ino) {
                Ok(0) => {}
                Ok(moved) => {
                    p.regrouped += 1;
                    p.moved_blocks += moved;
                }
                Err(Error::NotFound(_)) | Err(Error::Stale(_)) => {}
                Err(e) => return Err(Error::Invalid(format!("{path}: {e}"))),
            }
            p.files_done += 1;
            progress(&p);
        }
        report.files = p.files_done;
        report.regrouped = p.regrouped;
        report.moved_blocks = p.moved_blocks;
        report.complete = true;
        report.duration = t0.elapsed();
        Ok(report)
    }
}
