//! Transactions for programs that cannot link the library (docs/TXN.md):
//! three ioctls any file or directory of the mount takes, `_IO('h', 1)`
//! begin, `_IO('h', 2)` commit and `_IO('h', 3)` abort. A transaction
//! belongs to the thread that began it: from then until it commits or
//! aborts, that thread's reads and writes of files of the mount are the
//! transaction's (writes only to protected files, `user.hurricane.txn` =
//! "1", which the mount opens without page cache so every read and write
//! reaches it as it is made). Other threads see nothing of it until commit.
//! A deadlock victim's next request fails with EDEADLK; it aborts and
//! begins again. A transaction whose thread is gone is aborted at the next
//! begin of any thread, and every open one at unmount.

use hurricane::{Error, Fs, Result, Transaction};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// `_IO('h', 1)`: begin a transaction for the calling thread.
pub const TXN_BEGIN: u32 = (b'h' as u32) << 8 | 1;
/// `_IO('h', 2)`: commit it (durable when the call returns).
pub const TXN_COMMIT: u32 = (b'h' as u32) << 8 | 2;
/// `_IO('h', 3)`: abort it.
pub const TXN_ABORT: u32 = (b'h' as u32) << 8 | 3;

type Slot = Arc<Mutex<Option<Transaction>>>;

/// The open transactions, by calling thread.
#[derive(Default)]
pub struct Txns(Mutex<HashMap<u32, Slot>>);

/// The transaction of one thread, while it is open.
pub struct Handle(Slot);

impl Handle {
    pub fn write(&self, ino: u64, off: u64, data: &[u8]) -> Result<usize> {
        match &*self.0.lock() {
            Some(t) => t.write_ino(ino, off, data),
            None => Err(Error::Invalid("the transaction has ended".into())),
        }
    }
    /// The file's size as the transaction sees it (where an append goes).
    pub fn size(&self, ino: u64) -> Result<u64> {
        match &*self.0.lock() {
            Some(t) => t.size_ino(ino),
            None => Err(Error::Invalid("the transaction has ended".into())),
        }
    }
    pub fn read(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<usize> {
        match &*self.0.lock() {
            Some(t) => t.read_ino(ino, off, buf),
            None => Err(Error::Invalid("the transaction has ended".into())),
        }
    }
}

fn alive(tid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{tid}")).exists()
}

impl Txns {
    /// The open transaction of thread `tid`, if any.
    pub fn of(&self, tid: u32) -> Option<Handle> {
        let m = self.0.lock();
        if m.is_empty() {
            return None;
        }
        m.get(&tid).cloned().map(Handle)
    }

    /// Serves a transaction ioctl; None for any other command.
    pub fn ioctl(&self, fs: &Fs, tid: u32, cmd: u32) -> Option<Result<()>> {
        Some(match cmd {
            TXN_BEGIN => self.begin(fs, tid),
            TXN_COMMIT => match self.0.lock().remove(&tid) {
                Some(slot) => match slot.lock().take() {
                    Some(t) => t.commit(),
                    None => Err(Error::Invalid("the transaction has ended".into())),
                },
                None => Err(Error::Invalid("no transaction is open on this thread".into())),
            },
            TXN_ABORT => match self.0.lock().remove(&tid) {
                Some(slot) => {
                    if let Some(t) = slot.lock().take() {
                        t.abort();
                    }
                    Ok(())
                }
                None => Err(Error::Invalid("no transaction is open on this thread".into())),
            },
            _ => return None,
        })
    }

    fn begin(&self, fs: &Fs, tid: u32) -> Result<()> {
        let gone: Vec<Slot> = {
            let mut m = self.0.lock();
            if m.contains_key(&tid) {
                return Err(Error::Invalid("a transaction is already open on this thread".into()));
            }
            let dead: Vec<u32> = m.keys().copied().filter(|&t| !alive(t)).collect();
            dead.iter().filter_map(|t| m.remove(t)).collect()
        };
        for slot in gone {
            if let Some(t) = slot.lock().take() {
                tracing::info!("transaction {} aborted: its thread is gone", t.id());
                t.abort();
            }
        }
        let t = fs.begin()?;
        self.0.lock().insert(tid, Arc::new(Mutex::new(Some(t))));
        Ok(())
    }

    /// Aborts every open transaction (unmount).
    pub fn abort_all(&self) {
        let all: Vec<Slot> = self.0.lock().drain().map(|(_, s)| s).collect();
        for s in all {
            if let Some(t) = s.lock().take() {
                t.abort();
            }
        }
    }
}
