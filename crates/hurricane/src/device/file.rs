use super::Device;
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Reads at least this large that continue a sequential stream ask the host
/// to read ahead (see `FileDevice::read_ahead`); smaller ones are left to
/// the host's own heuristics.
const STREAM_READ: usize = 256 << 10;
/// How far past a stream's latest read the host is asked to have data ready:
/// a few of the mount's 1 MiB requests per device, so a device's next reads
/// are under way while the others are being read.
const READ_AHEAD: u64 = 8 << 20;
/// How often a request checks that the file is still there (one fstat).
const GONE_CHECK: Duration = Duration::from_millis(100);

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
    /// The file was deleted or the block device removed: every request fails.
    gone: AtomicBool,
    /// When the file was last checked (nanoseconds since `opened`).
    checked: AtomicU64,
    opened: Instant,
    /// The same file opened again with `O_DIRECT`, for uncached writes;
    /// None where the host's file system refuses it.
    direct: OnceLock<Option<File>>,
}

/// Uncached writes shorter than this go through the page cache: a direct
/// write waits for the disk, which only large ones amortise.
const UNCACHED_MIN: usize = 256 << 10;
/// Alignment of the memory, offset and length of a direct write (the
/// largest logical block size of disks in use).
const DIRECT_ALIGN: usize = 4096;

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
        FileDevice {
            file,
            name,
            size,
            is_block,
            stream_end: AtomicU64::new(u64::MAX),
            ahead_end: AtomicU64::new(0),
            gone: AtomicBool::new(false),
            checked: AtomicU64::new(0),
            opened: Instant::now(),
            direct: OnceLock::new(),
        }
    }

    /// Whether the file is gone, checking again (one fstat) when the last
    /// check is older than `GONE_CHECK` or `now` is set. A deleted image
    /// file stays readable through its open descriptor, but nothing written
    /// to it survives: it has no name left (`st_nlink == 0`). A removed
    /// block device fails every request with ENXIO or ENODEV.
    fn check_gone(&self, now: bool) -> bool {
        if self.gone.load(Relaxed) {
            return true;
        }
        let t = self.opened.elapsed().as_nanos() as u64;
        let last = self.checked.load(Relaxed);
        if !now && t.saturating_sub(last) < GONE_CHECK.as_nanos() as u64 {
            return false;
        }
        self.checked.store(t, Relaxed);
        let gone = match rustix::fs::fstat(&self.file) {
            Ok(st) => st.st_nlink == 0,
            Err(e) => matches!(e, rustix::io::Errno::NXIO | rustix::io::Errno::NODEV),
        };
        if gone {
            tracing::warn!("{}: gone ({})", self.name, self.gone_why());
            self.gone.store(true, Relaxed);
        }
        gone
    }

    fn gone_why(&self) -> &'static str {
        if self.is_block {
            "its block device was removed"
        } else {
            "its image file was deleted"
        }
    }

    fn gone_err(&self) -> Error {
        Error::Device(format!("{} is gone: {}", self.name, self.gone_why()))
    }

    /// Fails a request to a device that is gone; after an I/O error, checks
    /// at once whether that is why.
    fn guard<T>(&self, r: Result<T>) -> Result<T> {
        match r {
            Ok(v) => Ok(v),
            Err(e) => {
                let lost = matches!(&e, Error::Io { source, .. }
                    if matches!(source.raw_os_error(), Some(libc::ENXIO) | Some(libc::ENODEV)));
                if lost {
                    self.gone.store(true, Relaxed);
                }
                if self.check_gone(true) {
                    return Err(self.gone_err());
                }
                Err(e)
            }
        }
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

    fn write_err(&self, e: std::io::Error) -> Error {
        match e.raw_os_error() {
            Some(libc::ENOSPC) => Error::NoSpace(format!("{} (host file system full)", self.name)),
            _ => Error::io(&self.name, e),
        }
    }

    /// The file opened with `O_DIRECT`, through its descriptor (the same
    /// file even if renamed since), once; None where that is refused or the
    /// device is read-only.
    fn direct_file(&self) -> Option<&File> {
        self.direct
            .get_or_init(|| {
                use std::os::fd::AsRawFd;
                use std::os::unix::fs::OpenOptionsExt;
                let path = format!("/proc/self/fd/{}", self.file.as_raw_fd());
                let f = OpenOptions::new().write(true).custom_flags(libc::O_DIRECT).open(path);
                if let Err(e) = &f {
                    tracing::debug!(device = %self.name, error = %e, "no direct writes: the page cache takes them");
                }
                f.ok()
            })
            .as_ref()
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
        if self.check_gone(false) {
            return Err(self.gone_err());
        }
        let r = match self.file.read_exact_at(buf, offset) {
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
        };
        self.guard(r)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        if self.check_gone(false) {
            return Err(self.gone_err());
        }
        let r = self.file.write_all_at(buf, offset).map_err(|e| self.write_err(e));
        self.guard(r)
    }
    fn write_at_uncached(&self, buf: &[u8], offset: u64) -> Result<()> {
        let aligned = buf.len() >= UNCACHED_MIN
            && (buf.as_ptr() as usize).is_multiple_of(DIRECT_ALIGN)
            && buf.len().is_multiple_of(DIRECT_ALIGN)
            && offset.is_multiple_of(DIRECT_ALIGN as u64);
        if let Some(f) = self.direct_file().filter(|_| aligned) {
            if self.check_gone(false) {
                return Err(self.gone_err());
            }
            match f.write_all_at(buf, offset) {
                // An alignment the file system does not take: the page
                // cache takes the write instead.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                r => return self.guard(r.map_err(|e| self.write_err(e))),
            }
        }
        self.write_at(buf, offset)
    }
    fn flush(&self) -> Result<()> {
        if self.check_gone(false) {
            return Err(self.gone_err());
        }
        let r = self.file.sync_data().map_err(|e| Error::io(&self.name, e));
        self.guard(r)
    }
    fn gone(&self) -> bool {
        // An I/O error already checked; otherwise at most every GONE_CHECK.
        self.check_gone(false)
    }
    fn gone_now(&self) -> bool {
        self.check_gone(true)
    }
    fn zero_range(&self, offset: u64, len: u64) -> Result<bool> {
        if self.check_gone(false) {
            return Err(self.gone_err());
        }
        use rustix::fs::FallocateFlags;
        // Block devices take it since Linux 4.9, image files on every file
        // system that keeps unwritten extents; elsewhere the zeros are written.
        match rustix::fs::fallocate(&self.file, FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE, offset, len) {
            Ok(()) => Ok(true),
            Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::NOSYS | rustix::io::Errno::INVAL) => Ok(false),
            Err(rustix::io::Errno::NOSPC) => Err(Error::NoSpace(format!("{} (host file system full)", self.name))),
            Err(e) => self.guard(Err(Error::io(&self.name, std::io::Error::from(e)))),
        }
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
    use std::sync::Arc;

    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        (0..len as u64).map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed) >> 7) as u8).collect()
    }

    /// A zeroed range reads as zeros and its neighbours keep their bytes,
    /// through the device handle too; a device that cannot zero in place
    /// (memory) gets the zeros written and counted.
    #[test]
    fn zeroed_ranges_read_as_zeros() {
        use crate::device::{DeviceHandle, MemDevice};
        let dir = tempfile::tempdir().unwrap();
        let size = 4u64 << 20;
        let file: Arc<dyn Device> = Arc::new(FileDevice::create(&dir.path().join("d.img"), size).unwrap());
        let mem: Arc<dyn Device> = Arc::new(MemDevice::new("mem:0", size));
        for dev in [file, mem] {
            let in_place = dev.zero_range(0, 4096).unwrap();
            let data = pattern(size as usize, 3);
            dev.write_at(&data, 0).unwrap();
            let h = DeviceHandle::new(0, dev.clone());
            let before = h.stats.snapshot().write_bytes;
            h.zero_blocks(10, 300).unwrap();
            let written = h.stats.snapshot().write_bytes - before;
            assert_eq!(written, if in_place { 0 } else { 300 * 4096 }, "{}", dev.name());
            let mut back = vec![0u8; size as usize];
            dev.read_at(&mut back, 0).unwrap();
            assert!(back[..10 * 4096] == data[..10 * 4096]);
            assert!(back[10 * 4096..310 * 4096].iter().all(|&b| b == 0), "{}", dev.name());
            assert!(back[310 * 4096..] == data[310 * 4096..]);
            // Past the end: refused, nothing written.
            assert!(h.zero_blocks(size / 4096 - 1, 2).is_err());
        }
    }

    /// Whether the host's page cache holds any of [offset, offset+len) of
    /// the file: a read that must not wait for the disk gets something.
    fn cached(file: &File, offset: u64, len: usize) -> bool {
        let mut buf = vec![0u8; len];
        let mut io = [std::io::IoSliceMut::new(&mut buf)];
        matches!(rustix::io::preadv2(file, &mut io, offset, rustix::io::ReadWriteFlags::NOWAIT), Ok(n) if n > 0)
    }

    /// A resilvering device's large aligned writes bypass the page cache
    /// (where the host's file system allows direct I/O), read back, and are
    /// durable at flush; small or unaligned ones go through the cache and
    /// read back the same; a device in any other state writes through the
    /// cache.
    #[test]
    fn a_resilvering_device_writes_past_the_page_cache() {
        use crate::device::{DeviceHandle, DeviceState};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.img");
        let size = 8u64 << 20;
        let dev = Arc::new(FileDevice::create(&path, size).unwrap());
        let h = DeviceHandle::new(0, dev.clone());
        // 1 MiB at a 4 KiB-aligned address.
        let mut backing = vec![0u8; (2 << 20) + DIRECT_ALIGN];
        let at = backing.as_ptr().align_offset(DIRECT_ALIGN);
        let big = &mut backing[at..at + (1 << 20)];
        big.copy_from_slice(&pattern(1 << 20, 11));
        let big = &*big;
        h.set_state(DeviceState::Resilvering);
        h.write_blocks(256, big).unwrap();
        // Misaligned in memory (512 bytes past a 4 KiB boundary, whatever
        // the allocator returned), and short: through the cache.
        let mut odd_backing = vec![0u8; (1 << 20) + 2 * DIRECT_ALIGN];
        let at = odd_backing.as_ptr().align_offset(DIRECT_ALIGN) + 512;
        odd_backing[at..at + (1 << 20)].copy_from_slice(&pattern(1 << 20, 12));
        let odd = &odd_backing[at..at + (1 << 20)];
        h.write_blocks(768, odd).unwrap();
        let small = pattern(8192, 13);
        h.write_blocks(1, &small).unwrap();
        dev.flush().unwrap();
        let direct = dev.direct_file().is_some();
        if direct {
            assert!(!cached(&dev.file, 1 << 20, 1 << 20), "the large aligned write went through the page cache");
        } else {
            eprintln!("this file system refuses O_DIRECT: every write went through the page cache");
        }
        assert!(cached(&dev.file, 3 << 20, 1 << 20), "the unaligned write bypassed the cache");
        h.set_state(DeviceState::Online);
        let mut back = vec![0u8; 1 << 20];
        h.read_blocks(256, &mut back).unwrap();
        assert!(back == big, "large aligned write");
        h.read_blocks(768, &mut back).unwrap();
        assert!(back[..] == odd[..], "unaligned write");
        let mut back = vec![0u8; 8192];
        h.read_blocks(1, &mut back).unwrap();
        assert_eq!(back, small);
        // Online again: the same write is cached.
        h.write_blocks(1024, big).unwrap();
        assert!(cached(&dev.file, 4 << 20, 1 << 20));
        // What the direct writes left is on the file, for another opener.
        drop(h);
        drop(dev);
        let again = FileDevice::open(&path, false).unwrap();
        let mut back = vec![0u8; 1 << 20];
        again.read_at(&mut back, 1 << 20).unwrap();
        assert!(back == big);
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

    /// A deleted image file is noticed (within the check interval, and at
    /// once by a flush after an error check) and every request fails from
    /// then on, naming the file; a handle on it turns Missing.
    #[test]
    fn deleted_image_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.img");
        let dev = Arc::new(FileDevice::create(&path, 1 << 20).unwrap());
        let h = crate::device::DeviceHandle::new(3, dev.clone());
        h.write_blocks(1, &[7u8; 4096]).unwrap();
        assert!(!dev.gone());
        std::fs::remove_file(&path).unwrap();
        std::thread::sleep(GONE_CHECK + Duration::from_millis(20));
        let e = h.write_blocks(1, &[8u8; 4096]).unwrap_err().to_string();
        assert!(e.contains("d.img") && e.contains("deleted"), "{e}");
        assert!(dev.gone());
        assert_eq!(h.state(), crate::device::DeviceState::Missing);
        let mut b = [0u8; 4096];
        let e = h.read_blocks(1, &mut b).unwrap_err().to_string();
        assert!(e.contains("3 (") && e.contains("missing"), "{e}");
        assert!(dev.read_at(&mut b, 4096).is_err());
        assert!(dev.flush().is_err());
    }
}
