//! Threads that serve large reads away from the threads that take requests.
//!
//! The kernel sends a stream's readahead as several 1 MiB READs at once,
//! and with FUSE over io_uring they all arrive on the queue of the reader's
//! CPU, served by one thread. Served there, one read at a time waits for
//! its device while the others wait in the queue, and the pool's devices
//! work one after another. Handed to these threads, the reads of a window
//! reach their devices together; the queue thread goes back to taking
//! requests, and each reply finds its way back to its queue (see
//! `uring::EntrySink`).

use crossbeam_channel::{Receiver, Sender};

type Job = Box<dyn FnOnce() + Send>;

pub(crate) struct Workers {
    tx: Sender<Job>,
}

impl Workers {
    /// Starts `n` threads; they end when the last handle is dropped.
    pub fn new(n: usize) -> Workers {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        for i in 0..n {
            let rx: Receiver<Job> = rx.clone();
            let spawned = std::thread::Builder::new().name(format!("hurricane-io-{i}")).spawn(move || {
                while let Ok(job) = rx.recv() {
                    job();
                }
            });
            if let Err(e) = spawned {
                // Fewer threads only means fewer reads in flight; with none,
                // `run` serves every job on the caller's thread.
                tracing::warn!("cannot start I/O thread {i}: {e}");
                break;
            }
        }
        Workers { tx }
    }

    /// Runs `job` on one of the threads, or on this one if none is left.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        if let Err(crossbeam_channel::SendError(job)) = self.tx.send(Box::new(job)) {
            job();
        }
    }
}

/// Number of CPU queues the kernel creates: one per possible CPU.
pub(crate) fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| {
            s.trim().split(',').map(|r| r.split('-').next_back().and_then(|x| x.parse::<usize>().ok())).max().flatten()
        })
        .map(|last| last + 1)
        .unwrap_or_else(hurricane::affinity::cpus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    /// Jobs run concurrently (all four meet at a barrier), and every one runs.
    #[test]
    fn jobs_run_in_parallel() {
        let w = Workers::new(4);
        let barrier = Arc::new(Barrier::new(5));
        let (tx, rx) = std::sync::mpsc::channel();
        for i in 0..4 {
            let (b, tx) = (barrier.clone(), tx.clone());
            w.run(move || {
                b.wait();
                tx.send(i).unwrap();
            });
        }
        barrier.wait();
        let mut got: Vec<i32> = (0..4).map(|_| rx.recv().unwrap()).collect();
        got.sort();
        assert_eq!(got, vec![0, 1, 2, 3]);
    }
}
