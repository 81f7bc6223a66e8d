use super::Device;
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Reads at least this large that continue a sequential stream ask the host
/// to read ahead (see `FileDevice::read_ahead`); smaller ones are left to
/// the host's own heuristics.
const STREAM_READ: usize = 256 << 10;
/// How far past a stream's latest read the host is asked to have data ready:
/// a few of the mount's 1 MiB requests per device, so a device's next reads
/// are under way while the others are being read.
const READ_AHEAD: u64 = 8 << 20;

/// An image file or a block device, accessed with positioned reads and writes.
pub struct FileDevice {
    file: File,
    name: String,
    size: u64,
    is_block: bool,
    /// End of the last large read: a read starting there continues a stream.
    stream_end: AtomicU64,
    /// End of the range the host was last asked to read ahead.
    ahead_end: AtomicU64,
}

impl FileDevice {
    /// Creates (or extends) an image file of `size` bytes. The file is sparse:
    /// unused space costs nothing on the host.
    pub fn create(path: &Path, size: u64) -> Result<Self> {
        let name = path.display().to_string();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(&name, e))?;
        let meta = file.metadata().map_err(|e| Error::io(&name, e))?;
        if meta.file_type().is_block_device() {
            return Self::open(path, true);
        }
        file.set_len(size).map_err(|e| Error::io(&name, e))?;
        Ok(FileDevice::new(file, name, size, false))
    }

    fn new(file: File, name: String, size: u64, is_block: bool) -> Self {
        FileDevice { file, name, size, is_block, stream_end: AtomicU64::new(u64::MAX), ahead_end: AtomicU64::new(0) }
    }

    /// A layout spreads a sequential file read over its devices, so each
    /// device sees large reads at a fraction of the file's rate, one at a
    /// time when the mount serves a stream's requests in order. The host's
    /// readahead does not keep up with that: most reads waited for the disk
    /// (2-3 ms per 1 MiB read, one device at a time). Asking the host for
    /// the range past each read of a stream puts every device's next data
    /// on its way while the current read is served.
    fn read_ahead(&self, offset: u64, len: usize) {
        if len < STREAM_READ {
            return;
        }
        let end = offset.saturating_add(len as u64);
        let continues = self.stream_end.swap(end, Relaxed) == offset;
        // Requests of one stream may be served a little out of order; one
        // inside the range already asked for still belongs to the stream.
        let ahead = self.ahead_end.load(Relaxed);
        let inside = offset < ahead && end.saturating_add(READ_AHEAD) >= ahead;
        if !continues && !inside {
            return;
        }
        // While half the window is still ahead, wait: the host then reads
        // in steps of half a window, not one request's worth at a time.
        if inside && ahead.saturating_sub(end) > READ_AHEAD / 2 {
            return;
        }
        // Only the part not asked for yet: asking again costs a page cache
        // lookup per page.
        let from = if inside { ahead.max(end) } else { end };
        let to = end.saturating_add(READ_AHEAD).min(self.size);
        if to <= from {
            return;
        }
        self.ahead_end.store(to, Relaxed);
        // A hint only: when it fails, reads are just not helped.
        let _ =
            rustix::fs::fadvise(&self.file, from, std::num::NonZeroU64::new(to - from), rustix::fs::Advice::WillNeed);
    }

    pub fn open(path: &Path, writable: bool) -> Result<Self> {
        let name = path.display().to_string();
        let file = OpenOptions::new().read(true).write(writable).open(path).map_err(|e| Error::io(&name, e))?;
        let meta = file.metadata().map_err(|e| Error::io(&name, e))?;
        let is_block = meta.file_type().is_block_device();
        let size = if is_block {
            block_device_size(&file).map_err(|e| Error::io(&name, e))?
        } else if meta.is_file() {
            meta.len()
        } else {
            return Err(Error::Device(format!("{name}: not a regular file or block device")));
        };
        Ok(FileDevice::new(file, name, size, is_block))
    }
}

fn block_device_size(file: &File) -> std::io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut f = file;
    let size = f.seek(SeekFrom::End(0))?;
    f.seek(SeekFrom::Start(0))?;
    Ok(size)
}

impl Device for FileDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        match self.file.read_exact_at(buf, offset) {
            Ok(()) => {
                self.read_ahead(offset, buf.len());
                Ok(())
            }
            // An image shorter than its superblock says (truncated while
            // unmounted): name the device and what is missing.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(Error::Device(format!(
                "{}: truncated: read of {} bytes at offset {} past the end of the file",
                self.name,
                buf.len(),
                offset
            ))),
            Err(e) => Err(Error::io(&self.name, e)),
        }
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        self.file.write_all_at(buf, offset).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOSPC) => Error::NoSpace(format!("{} (host file system full)", self.name)),
            _ => Error::io(&self.name, e),
        })
    }
    fn flush(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io(&self.name, e))
    }
    fn discard(&self, offset: u64, len: u64) -> Result<()> {
        if self.is_block {
            return Ok(());
        }
        use rustix::fs::FallocateFlags;
        if let Err(e) =
            rustix::fs::fallocate(&self.file, FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE, offset, len)
        {
            tracing::debug!("{}: hole punch failed: {e}", self.name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        (0..len as u64).map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8).collect()
    }

    /// Streams that ask the host to read ahead (forward, slightly out of
    /// order, up to the end of the device, restarted) still read exactly
    /// what was written.
    #[test]
    fn streaming_reads_return_the_written_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let size = 12u64 << 20;
        let dev = FileDevice::create(&dir.path().join("d.img"), size).unwrap();
        let data = pattern(size as usize, 7);
        dev.write_at(&data, 0).unwrap();
        let unit = 1usize << 20;
        let mut order: Vec<usize> = (0..size as usize / unit).collect();
        order.swap(3, 4);
        for pass in 0..2 {
            for &i in &order {
                let mut buf = vec![0u8; unit];
                dev.read_at(&mut buf, (i * unit) as u64).unwrap();
                assert!(buf == data[i * unit..(i + 1) * unit], "pass {pass}, unit {i}");
            }
        }
        // A stream that ends exactly at the end of the device, then small reads.
        let mut tail = vec![0u8; STREAM_READ];
        dev.read_at(&mut tail, size - STREAM_READ as u64).unwrap();
        assert!(tail == data[data.len() - STREAM_READ..]);
        let mut small = vec![0u8; 4096];
        dev.read_at(&mut small, 4096).unwrap();
        assert!(small == data[4096..8192]);
        // Past the end is still an error, not a panic.
        assert!(dev.read_at(&mut tail, size - 4096).is_err());
    }
}
