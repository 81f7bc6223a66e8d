//! Write errors found after the write returned (held small-file writes
//! that a dead device gave up, `blocks/colocate.rs`), kept until they are
//! reported, as Linux's errseq keeps writeback errors: each file's next
//! [`Fs::fsync`](super::Fs::fsync) reports its own once, and the pool's
//! next [`Fs::sync`](super::Fs::sync) reports that some were lost since
//! the last sync that said so.

use crate::blocks::colocate::LostWrites;
use crate::error::Error;
use crate::journal::Ino;
use parking_lot::Mutex;
use std::collections::HashMap;

#[derive(Default)]
pub(crate) struct WriteErrors {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Each file's first unreported loss.
    by_ino: HashMap<Ino, String>,
    /// The losses since the pool's last sync reported them.
    for_sync: Option<String>,
}

impl WriteErrors {
    /// Records what a commit's drain gave up, and logs it.
    pub(crate) fn note(&self, lost: &[LostWrites]) {
        let mut g = self.inner.lock();
        for l in lost {
            tracing::error!(
                device = l.device,
                files = l.owners.len(),
                blocks = l.blocks,
                "held small-file writes lost: {}; inodes {:?}",
                l.error,
                l.owners
            );
            for &ino in &l.owners {
                g.by_ino.entry(ino).or_insert_with(|| {
                    format!("data written to inode {ino} never reached device {}: {}", l.device, l.error)
                });
            }
            let what = format!(
                "held writes of {} file(s) ({} blocks) never reached device {}: {}",
                l.owners.len(),
                l.blocks,
                l.device,
                l.error
            );
            g.for_sync = Some(match g.for_sync.take() {
                Some(before) => format!("{before}; {what}"),
                None => what,
            });
        }
    }

    /// The error `ino`'s fsync reports, once.
    pub(crate) fn take_for(&self, ino: Ino) -> Option<Error> {
        let mut g = self.inner.lock();
        if g.by_ino.is_empty() {
            return None;
        }
        g.by_ino.remove(&ino).map(Error::Device)
    }

    /// Drops what was kept for `ino`, which is being freed.
    pub(crate) fn forget(&self, ino: Ino) {
        let mut g = self.inner.lock();
        if !g.by_ino.is_empty() {
            g.by_ino.remove(&ino);
        }
    }

    /// The error the pool's sync reports, once.
    pub(crate) fn take_for_sync(&self) -> Option<Error> {
        self.inner.lock().for_sync.take().map(Error::Device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost(device: u32, owners: &[u64]) -> LostWrites {
        LostWrites {
            device,
            owners: owners.to_vec(),
            blocks: owners.len() * 2,
            error: Error::Device(format!("{device} (mem{device}) is faulted")),
        }
    }

    #[test]
    fn each_file_and_the_pool_hear_of_a_loss_once() {
        let w = WriteErrors::default();
        assert!(w.take_for(7).is_none() && w.take_for_sync().is_none());
        w.note(&[lost(1, &[7, 9])]);
        w.note(&[lost(2, &[9, 11])]);
        let e = w.take_for(9).unwrap().to_string();
        assert!(e.contains("inode 9") && e.contains("device 1"), "the first loss is kept: {e}");
        assert!(w.take_for(9).is_none(), "reported once");
        let e = w.take_for_sync().unwrap().to_string();
        assert!(e.contains("device 1") && e.contains("device 2"), "{e}");
        assert!(w.take_for_sync().is_none());
        assert!(w.take_for(7).is_some());
        // A freed inode's loss goes with it.
        w.forget(11);
        assert!(w.take_for(11).is_none());
        assert!(w.take_for(3).is_none());
    }
}
