//! What survives the devices that are down: every file's layout asked for
//! its [`Health`] (for `hurricane status`, the mount's statistics, tests);
//! and the files with data already found unrecoverable (the permanent
//! error list, `errors.rs`), which a pool with every device back still has.

use super::errors::DataError;
use super::Fs;
use crate::blocks::Health;
use crate::journal::Ino;
use crate::namespace::ROOT;
use std::collections::HashMap;

/// Files by health, with the paths of the worst off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolHealth {
    /// Files whose every copy or piece is in place.
    pub healthy: u64,
    /// Files still readable in full, with less redundancy than asked for.
    pub degraded: u64,
    /// Files some of whose data cannot be read.
    pub lost: u64,
    /// Paths of lost files (at most the limit given), sorted.
    pub lost_paths: Vec<String>,
    /// Paths of degraded files (at most the limit given), sorted.
    pub degraded_paths: Vec<String>,
    /// The meta-file (the pool's meta-data checkpoint).
    pub meta: Health,
    /// Files on the permanent error list.
    pub error_files: u64,
    /// Those entries (at most the limit given), by inode, with every path
    /// of each file.
    pub errors: Vec<(DataError, Vec<String>)>,
}

impl Fs {
    /// Health of every file with device data, where a device is down when
    /// it serves no reads (missing, faulted, resilvering, removed). Lists up
    /// to `limit` paths of lost and of degraded files.
    pub fn health(&self, limit: usize) -> PoolHealth {
        let devs = &self.inner.storage.devs;
        let down = |d: u32| devs.get(d as usize).is_none_or(|h| !h.state().readable());
        let mut h = PoolHealth {
            healthy: 0,
            degraded: 0,
            lost: 0,
            lost_paths: Vec::new(),
            degraded_paths: Vec::new(),
            meta: self.inner.state.store().file().layout().root().health(&down),
            error_files: 0,
            errors: Vec::new(),
        };
        let mut errs = self.data_errors();
        h.error_files = errs.len() as u64;
        errs.truncate(limit);
        if !errs.is_empty() {
            let mut paths = self.paths_of(&errs.iter().map(|e| e.ino).collect());
            h.errors = errs
                .into_iter()
                .map(|e| {
                    let p = paths.remove(&e.ino).unwrap_or_default();
                    (e, p)
                })
                .collect();
        }
        let mut lost = Vec::new();
        let mut degraded = Vec::new();
        for n in self.inner.state.each() {
            // A tree that cannot be read back serves no data: lost. Trees
            // not yet built are built for the look and dropped after it.
            let l = match n.data.read().peek_layout() {
                Ok(Some(l)) => l,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!("inode {}: {e}", n.ino);
                    h.lost += 1;
                    lost.push(n.ino);
                    continue;
                }
            };
            match l.root().health(&down) {
                Health::Ok => h.healthy += 1,
                Health::Degraded => {
                    h.degraded += 1;
                    degraded.push(n.ino);
                }
                Health::Lost => {
                    h.lost += 1;
                    lost.push(n.ino);
                }
            }
        }
        // Paths are a walk of the directory tree: made only when some are
        // asked for and some file is off.
        if limit > 0 && (!lost.is_empty() || !degraded.is_empty()) {
            let paths = self.inode_paths();
            let name = |ino: &Ino| paths.get(ino).cloned().unwrap_or_else(|| format!("inode {ino} (no path)"));
            let pick = |v: Vec<Ino>| {
                let mut p: Vec<String> = v.iter().map(name).collect();
                p.sort();
                p.truncate(limit);
                p
            };
            h.lost_paths = pick(lost);
            h.degraded_paths = pick(degraded);
        }
        h
    }

    /// One path for every inode reachable from the root (the first found
    /// for a file with several links).
    pub fn inode_paths(&self) -> HashMap<Ino, String> {
        let st = &self.inner.state;
        let mut out = HashMap::new();
        out.insert(ROOT, "/".to_string());
        let mut todo = vec![(ROOT, String::new())];
        while let Some((dir, prefix)) = todo.pop() {
            let Some(d) = st.get(dir) else { continue };
            let entries: Vec<(Vec<u8>, Ino)> = match d.data.read().dir() {
                Some(x) => match x.entries() {
                    Ok(v) => v.into_iter().map(|(k, e)| (k, e.ino)).collect(),
                    Err(e) => {
                        tracing::warn!("directory {dir}: {e}");
                        continue;
                    }
                },
                None => continue,
            };
            for (name, ino) in entries {
                if out.contains_key(&ino) {
                    continue;
                }
                let p = format!("{prefix}/{}", String::from_utf8_lossy(&name));
                out.insert(ino, p.clone());
                if st.get(ino).is_some_and(|n| n.data.read().is_dir()) {
                    todo.push((ino, p));
                }
            }
        }
        out
    }
}
