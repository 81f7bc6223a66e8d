//! A small pool of I/O threads that run prefetch requests in the
//! background, so a reader's next blocks are on their way to the cache
//! while it works on the current one (HFS: ASF prefetch requests handed to
//! the memory manager).
//!
//! Threads start on the first request, so pools that never prefetch cost
//! nothing. They block on device queues: with simulated or real disks, a
//! pool a few times wider than the device count keeps every device's queue
//! fed. They stop when the pool is dropped (the channel closes).

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use std::sync::OnceLock;

pub type Job = Box<dyn FnOnce() + Send + 'static>;

/// Requests waiting beyond this are refused (the caller gives up the
/// prefetch): read-ahead that far behind is useless.
const QUEUE: usize = 4096;

pub struct IoPool {
    threads: usize,
    tx: OnceLock<Option<Sender<Job>>>,
}

impl IoPool {
    pub fn new(threads: usize) -> Self {
        IoPool { threads: threads.max(1), tx: OnceLock::new() }
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    fn start(&self) -> Option<Sender<Job>> {
        let (tx, rx): (Sender<Job>, Receiver<Job>) = bounded(QUEUE);
        let mut started = 0;
        for i in 0..self.threads {
            let rx = rx.clone();
            let r = std::thread::Builder::new().name(format!("hurricane-io-{i}")).spawn(move || {
                crate::affinity::widen();
                while let Ok(job) = rx.recv() {
                    job();
                }
            });
            match r {
                Ok(_) => started += 1,
                Err(e) => tracing::warn!("cannot start I/O thread {i}: {e}"),
            }
        }
        (started > 0).then_some(tx)
    }

    /// Runs `job` on an I/O thread. Returns it back when it cannot be queued.
    pub fn submit(&self, job: Job) -> Result<(), Job> {
        let tx = self.tx.get_or_init(|| self.start());
        match tx {
            Some(tx) => tx.try_send(job).map_err(|e| match e {
                TrySendError::Full(j) | TrySendError::Disconnected(j) => j,
            }),
            None => Err(job),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn runs_jobs_on_its_threads() {
        let p = IoPool::new(3);
        let n = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            let n = n.clone();
            assert!(p
                .submit(Box::new(move || {
                    n.fetch_add(1, Ordering::SeqCst);
                }))
                .is_ok());
        }
        let t0 = std::time::Instant::now();
        while n.load(Ordering::SeqCst) < 100 && t0.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(n.load(Ordering::SeqCst), 100);
    }
}
