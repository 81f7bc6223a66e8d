//! Pools of simulated disks over memory, and the HFS access patterns.

use hurricane::device::{Device, SimDevice, SimParams};
use hurricane::open::{CursorKind, OpenFile, OpenSpec, Prefetch};
use hurricane::{FormatOptions, Fs, Options};
use parking_lot::RwLock;
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// A device in memory: no host-disk noise under the simulator's timing.
pub struct RamDisk {
    name: String,
    data: RwLock<Vec<u8>>,
}

impl RamDisk {
    pub fn new(name: impl Into<String>, size: u64) -> Self {
        RamDisk { name: name.into(), data: RwLock::new(vec![0u8; size as usize]) }
    }
}

impl Device for RamDisk {
    fn name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> u64 {
        self.data.read().len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> hurricane::Result<()> {
        let d = self.data.read();
        let o = offset as usize;
        let src = o
            .checked_add(buf.len())
            .and_then(|e| d.get(o..e))
            .ok_or_else(|| hurricane::Error::Device(format!("{}: read past the end", self.name)))?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> hurricane::Result<()> {
        let mut d = self.data.write();
        let o = offset as usize;
        let dst = o
            .checked_add(buf.len())
            .and_then(|e| d.get_mut(o..e))
            .ok_or_else(|| hurricane::Error::Device(format!("{}: write past the end", self.name)))?;
        dst.copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> hurricane::Result<()> {
        Ok(())
    }
}

/// A pool whose devices are simulated disks over memory.
pub struct SimPool {
    pub fs: Fs,
    pub sims: Vec<Arc<SimDevice>>,
}

impl SimPool {
    /// `devices` disks of `size` bytes; timing is off until [`SimPool::timing`].
    pub fn new(devices: usize, size: u64, params: Option<&SimParams>, opts: Options) -> Result<SimPool, String> {
        let p = params.cloned().unwrap_or_default();
        let sims: Vec<Arc<SimDevice>> = (0..devices)
            .map(|i| Arc::new(SimDevice::new(Arc::new(RamDisk::new(format!("ram{i}"), size)), p.clone())))
            .collect();
        for s in &sims {
            s.set_enabled(false);
        }
        let devs: Vec<Arc<dyn Device>> = sims.iter().map(|s| s.clone() as Arc<dyn Device>).collect();
        let fo = FormatOptions { journal_size: Some(2 << 20), ..Default::default() };
        Fs::format(devs.clone(), &fo).map_err(crate::err)?;
        let fs = Fs::open(devs, Options { background_commit: false, ..opts }).map_err(crate::err)?;
        Ok(SimPool { fs, sims })
    }

    pub fn timing(&self, on: bool) {
        for s in &self.sims {
            s.set_enabled(on);
        }
    }

    /// Empty block cache and cold disk buffers: each run starts alike.
    pub fn cold(&self) {
        self.fs.drop_caches();
        for s in &self.sims {
            s.reset();
        }
    }

    /// Writes a file of `size` bytes (timing off).
    pub fn write_file(&self, path: &str, layout: &str, size: u64) -> Result<(), String> {
        self.timing(false);
        let mut f = self.fs.create(path, Some(layout)).map_err(crate::err)?;
        let chunk: Vec<u8> = (0..1u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect();
        let mut off = 0;
        while off < size {
            let n = (size - off).min(chunk.len() as u64) as usize;
            f.write_all_at(&chunk[..n], off).map_err(crate::err)?;
            off += n as u64;
        }
        self.fs.sync().map_err(crate::err)?;
        Ok(())
    }

    /// Each device alone: `bytes` read sequentially in 4 KiB requests from
    /// `offset`, kept queued, straight from the simulated disk: the best a
    /// disk does with 4 KiB requests. Timed on the disk model's clock, so
    /// the reference does not move with the host's load. KB/s of each.
    pub fn device_kbps(&self, offset: u64, bytes: u64) -> Result<Vec<f64>, String> {
        Ok(self.sims.iter().map(|s| kbps(bytes, s.stream_seconds(offset, bytes, 4096))).collect())
    }
}

pub fn kbps(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1024.0 / secs.max(1e-9)
}

fn open(fs: &Fs, path: &str, cursor: CursorKind, prefetch: Prefetch) -> Result<OpenFile, String> {
    let spec = OpenSpec { cursor, prefetch, ..Default::default() };
    OpenFile::options().read(true).spec(spec).open(fs, path).map_err(crate::err)
}

/// HFS access pattern A: thread i reads bytes [i*region, (i+1)*region)
/// sequentially, `piece` bytes a read, with its own cursor. Returns
/// (bytes read, seconds).
pub fn pattern_a(
    fs: &Fs,
    path: &str,
    threads: usize,
    region: u64,
    piece: usize,
    prefetch: Prefetch,
) -> Result<(u64, f64), String> {
    let f = open(fs, path, CursorKind::PerThread, prefetch)?;
    let go = Barrier::new(threads + 1);
    let (bytes, secs) = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let (f, go) = (f.clone(), &go);
                s.spawn(move || -> Result<u64, String> {
                    let mut buf = vec![0u8; piece];
                    f.seek(std::io::SeekFrom::Start(t as u64 * region)).map_err(crate::err)?;
                    go.wait();
                    let mut got = 0;
                    while got < region {
                        let want = (region - got).min(piece as u64) as usize;
                        let n = f.read(&mut buf[..want]).map_err(crate::err)?;
                        if n == 0 {
                            break;
                        }
                        got += n as u64;
                    }
                    Ok(got)
                })
            })
            .collect();
        go.wait();
        let t0 = Instant::now();
        let mut total = 0;
        let mut res = Ok(());
        for h in hs {
            match h.join() {
                Ok(Ok(n)) => total += n,
                Ok(Err(e)) => res = Err(e),
                Err(_) => res = Err("a reader thread panicked".to_string()),
            }
        }
        res.map(|_| (total, t0.elapsed().as_secs_f64()))
    })?;
    Ok((bytes, secs))
}

/// HFS access pattern B: `threads` threads share one file pointer and read
/// `piece` bytes at a time until the end of the file.
pub fn pattern_b(fs: &Fs, path: &str, threads: usize, piece: usize, prefetch: Prefetch) -> Result<(u64, f64), String> {
    let f = open(fs, path, CursorKind::Shared, prefetch)?;
    let go = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                let (f, go) = (f.clone(), &go);
                s.spawn(move || -> Result<u64, String> {
                    let mut buf = vec![0u8; piece];
                    go.wait();
                    let mut got = 0;
                    loop {
                        let n = f.read(&mut buf).map_err(crate::err)?;
                        if n == 0 {
                            return Ok(got);
                        }
                        got += n as u64;
                    }
                })
            })
            .collect();
        go.wait();
        let t0 = Instant::now();
        let mut total = 0;
        let mut res = Ok(());
        for h in hs {
            match h.join() {
                Ok(Ok(n)) => total += n,
                Ok(Err(e)) => res = Err(e),
                Err(_) => res = Err("a reader thread panicked".to_string()),
            }
        }
        res.map(|_| (total, t0.elapsed().as_secs_f64()))
    })
}
