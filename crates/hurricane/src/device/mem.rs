use super::{Device, BLOCK_SIZE};
use crate::error::{Error, Result};
use parking_lot::Mutex;
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};

/// A device in memory that remembers which writes a power cut would lose:
/// writes since the last flush stay "volatile" until `flush`. Used by the
/// crash tests and for fault injection (fail after N writes).
///
/// It holds one image, what a reader sees. What the medium held at the
/// last flush is kept only for the blocks written since: making a device,
/// and a power cut's image, cost one copy of the device, not two.
pub struct MemDevice {
    name: String,
    size: u64,
    state: Mutex<MemDeviceState>,
    /// Writes left before every write fails with EIO; negative = never.
    fail_after: AtomicI64,
}

struct MemDeviceState {
    /// What a reader sees now.
    current: Vec<u8>,
    /// Each block written since the last flush, as it was at that flush.
    flushed: HashMap<u64, Box<[u8]>>,
    /// Writes not yet flushed, in issue order.
    volatile: Vec<(u64, Vec<u8>)>,
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
        // A zeroed buffer comes from the allocator as pages that are only
        // touched when written.
        Self::from_image(name, vec![0; size as usize])
    }

    pub fn from_image(name: impl Into<String>, image: Vec<u8>) -> Self {
        MemDevice {
            name: name.into(),
            size: image.len() as u64,
            state: Mutex::new(MemDeviceState { current: image, flushed: HashMap::new(), volatile: Vec::new() }),
            fail_after: AtomicI64::new(-1),
        }
    }

    /// The image a power cut would leave now.
    pub fn crash_image(&self, mode: CrashMode) -> Vec<u8> {
        let st = self.state.lock();
        if matches!(mode, CrashMode::KeepAll) {
            return st.current.clone();
        }
        // What the medium held at the last flush...
        let mut img = st.current.clone();
        for (blk, old) in &st.flushed {
            let o = *blk as usize * BLOCK_SIZE;
            img[o..o + old.len()].copy_from_slice(old);
        }
        // ... and the unflushed writes that made it.
        match mode {
            CrashMode::DropAll | CrashMode::KeepAll => {}
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
        let st = &mut *st;
        if !buf.is_empty() {
            for blk in o / BLOCK_SIZE..=(o + buf.len() - 1) / BLOCK_SIZE {
                st.flushed.entry(blk as u64).or_insert_with(|| {
                    let s = blk * BLOCK_SIZE;
                    st.current[s..(s + BLOCK_SIZE).min(st.current.len())].into()
                });
            }
        }
        st.current[o..o + buf.len()].copy_from_slice(buf);
        st.volatile.push((offset, buf.to_vec()));
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        let mut st = self.state.lock();
        st.volatile.clear();
        st.flushed.clear();
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

    /// Unflushed writes that overlap, straddle blocks and rewrite flushed
    /// data: every crash mode gives the flushed image plus the writes it
    /// keeps, applied in order, compared with an image built by hand.
    #[test]
    fn crash_images_are_the_flushed_image_plus_the_kept_writes() {
        let bs = BLOCK_SIZE;
        let size = 4 * bs + 100;
        let d = MemDevice::new("m", size as u64);
        let mut flushed = vec![0u8; size];
        let put = |img: &mut Vec<u8>, off: usize, data: &[u8]| img[off..off + data.len()].copy_from_slice(data);
        d.write_at(&[1; 3000], 1000).unwrap();
        put(&mut flushed, 1000, &[1; 3000]);
        d.flush().unwrap();
        let writes: Vec<(usize, Vec<u8>)> = vec![
            (bs - 10, vec![2; 30]),     // straddles blocks 0 and 1
            (2000, vec![3; 100]),       // rewrites flushed bytes
            (bs - 5, vec![4; 10]),      // over the first write
            (4 * bs + 50, vec![5; 50]), // the short last block
            (3 * bs, vec![6; bs]),      // a whole block
        ];
        for (off, data) in &writes {
            d.write_at(data, *off as u64).unwrap();
        }
        assert_eq!(d.crash_image(CrashMode::DropAll), flushed);
        let mut all = flushed.clone();
        for (off, data) in &writes {
            put(&mut all, *off, data);
        }
        assert_eq!(d.crash_image(CrashMode::KeepAll), all);
        assert_eq!(d.image(), all);
        for n in 0..=writes.len() {
            let mut want = flushed.clone();
            for (off, data) in &writes[..n] {
                put(&mut want, *off, data);
            }
            assert_eq!(d.crash_image(CrashMode::Prefix(n)), want, "prefix {n}");
        }
        // After a flush, nothing is volatile.
        d.flush().unwrap();
        assert_eq!(d.crash_image(CrashMode::DropAll), all);
        assert_eq!(d.volatile_writes(), 0);
    }
}
