use super::{Device, BLOCK_SIZE};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::sync::atomic::{AtomicI64, Ordering};

/// A device in memory that remembers which writes a power cut would lose:
/// writes since the last flush stay "volatile" until `flush`. Used by the
/// crash tests and for fault injection (fail after N writes).
pub struct MemDevice {
    name: String,
    size: u64,
    state: Mutex<MemDeviceState>,
    /// Writes left before every write fails with EIO; negative = never.
    fail_after: AtomicI64,
}

pub struct MemDeviceState {
    /// What a reader sees now.
    pub current: Vec<u8>,
    /// What survives a power cut.
    pub durable: Vec<u8>,
    /// Writes not yet flushed, in issue order.
    pub volatile: Vec<(u64, Vec<u8>)>,
}

/// What a simulated power cut does with writes that were not flushed.
#[derive(Debug, Clone, Copy)]
pub enum CrashMode {
    /// Every unflushed write is lost.
    DropAll,
    /// Every unflushed write made it (a clean stop without the final flush).
    KeepAll,
    /// Each unflushed block independently survives or not, as a disk with a
    /// write cache may reorder them.
    Random(u64),
    /// The first `n` unflushed writes survive, in order.
    Prefix(usize),
}

impl MemDevice {
    pub fn new(name: impl Into<String>, size: u64) -> Self {
        Self::from_image(name, vec![0; size as usize])
    }

    pub fn from_image(name: impl Into<String>, image: Vec<u8>) -> Self {
        MemDevice {
            name: name.into(),
            size: image.len() as u64,
            state: Mutex::new(MemDeviceState { current: image.clone(), durable: image, volatile: Vec::new() }),
            fail_after: AtomicI64::new(-1),
        }
    }

    /// The image a power cut would leave now.
    pub fn crash_image(&self, mode: CrashMode) -> Vec<u8> {
        let st = self.state.lock();
        let mut img = st.durable.clone();
        match mode {
            CrashMode::DropAll => {}
            CrashMode::KeepAll => img.clone_from(&st.current),
            CrashMode::Prefix(n) => {
                for (off, data) in st.volatile.iter().take(n) {
                    img[*off as usize..*off as usize + data.len()].copy_from_slice(data);
                }
            }
            CrashMode::Random(seed) => {
                let mut rng = StdRng::seed_from_u64(seed);
                for (off, data) in &st.volatile {
                    for (i, chunk) in data.chunks(BLOCK_SIZE).enumerate() {
                        if rng.gen_bool(0.5) {
                            let o = *off as usize + i * BLOCK_SIZE;
                            img[o..o + chunk.len()].copy_from_slice(chunk);
                        }
                    }
                }
            }
        }
        img
    }

    /// Number of writes issued since the last flush.
    pub fn volatile_writes(&self) -> usize {
        self.state.lock().volatile.len()
    }

    /// After `n` more successful writes, every write fails with EIO.
    pub fn fail_after_writes(&self, n: i64) {
        self.fail_after.store(n, Ordering::SeqCst);
    }

    /// The current contents (what a reader sees).
    pub fn image(&self) -> Vec<u8> {
        self.state.lock().current.clone()
    }
}

impl Device for MemDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let st = self.state.lock();
        let o = offset as usize;
        if o.checked_add(buf.len()).is_none_or(|e| e > st.current.len()) {
            return Err(Error::Device(format!("{}: read past the end", self.name)));
        }
        buf.copy_from_slice(&st.current[o..o + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let left = self.fail_after.load(Ordering::SeqCst);
        if left == 0 {
            return Err(Error::io(&self.name, std::io::Error::from_raw_os_error(libc::EIO)));
        }
        if left > 0 {
            self.fail_after.fetch_sub(1, Ordering::SeqCst);
        }
        let mut st = self.state.lock();
        let o = offset as usize;
        if o.checked_add(buf.len()).is_none_or(|e| e > st.current.len()) {
            return Err(Error::Device(format!("{}: write past the end", self.name)));
        }
        st.current[o..o + buf.len()].copy_from_slice(buf);
        st.volatile.push((offset, buf.to_vec()));
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        let mut st = self.state.lock();
        let st = &mut *st;
        for (off, data) in st.volatile.drain(..) {
            st.durable[off as usize..off as usize + data.len()].copy_from_slice(&data);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_drops_unflushed_writes() {
        let d = MemDevice::new("m", 4 * BLOCK_SIZE as u64);
        d.write_at(&[1; BLOCK_SIZE], 0).unwrap();
        d.flush().unwrap();
        d.write_at(&[2; BLOCK_SIZE], BLOCK_SIZE as u64).unwrap();
        let img = d.crash_image(CrashMode::DropAll);
        assert_eq!(img[0], 1);
        assert_eq!(img[BLOCK_SIZE], 0);
        let img = d.crash_image(CrashMode::KeepAll);
        assert_eq!(img[BLOCK_SIZE], 2);
        d.fail_after_writes(0);
        assert!(d.write_at(&[3; 10], 0).is_err());
    }
}
