use super::Device;
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
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
    /// A block device the kernel calls rotational (a disk that seeks).
    rotational: bool,
    /// End of the last large read: a read starting there continues a stream.
    stream_end: AtomicU64,
    /// End of the range the host was last asked to read ahead.
    ahead_end: AtomicU64,
    /// The file was deleted or the block device removed: every request fails.
    gone: AtomicBool,
    /// When the file was last checked (nanoseconds since `opened`).
    checked: AtomicU64,
    opened: Instant,
    /// The same file opened again with `O_DIRECT`, for uncached reads and
    /// writes (`writable`: it takes writes too); None where the host's file
    /// system refuses it.
    direct: OnceLock<Option<Direct>>,
}

/// The descriptor of [`FileDevice::direct_file`].
struct Direct {
    file: File,
    writable: bool,
}

/// Uncached requests shorter than this go through the page cache: a
/// direct request waits for the disk, which only large ones amortise.
const UNCACHED_MIN: usize = 256 << 10;
/// Alignment of the memory, offset and length of a direct write (the
/// largest logical block size of disks in use).
const DIRECT_ALIGN: usize = 4096;

/// The mode of a new image file: read and written by its owner only (an
/// image holds every file's data, whatever the files' own modes say).
pub const IMAGE_MODE: u32 = 0o600;

impl FileDevice {
    /// Creates (or extends) an image file of `size` bytes. The file is sparse:
    /// unused space costs nothing on the host.
    pub fn create(path: &Path, size: u64) -> Result<Self> {
        let name = path.display().to_string();
        // A new image is its owner's alone: it holds every file's data,
        // whatever the files' own modes say.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(IMAGE_MODE)
            .open(path)
            .map_err(|e| Error::io(&name, e))?;
        let meta = file.metadata().map_err(|e| Error::io(&name, e))?;
        if meta.file_type().is_block_device() {
            return Self::open(path, true);
        }
        file.set_len(size).map_err(|e| Error::io(&name, e))?;
        Ok(FileDevice::new(file, name, size, false))
    }

    /// An image file the caller has opened (to read and write), sized to
    /// `size` bytes (sparse, as [`FileDevice::create`] makes them);
    /// `name` names it in messages. Nothing is opened by name: a caller
    /// that made the file relative to a directory's descriptor
    /// (`dirfile::Dir::create_new_rw`) gets the file it made. Anything but
    /// a regular file is refused.
    pub fn from_file(file: File, name: impl Into<String>, size: u64) -> Result<Self> {
        let name = name.into();
        let meta = file.metadata().map_err(|e| Error::io(&name, e))?;
        if !meta.is_file() {
            return Err(Error::Device(format!("{name}: not a regular file")));
        }
        file.set_len(size).map_err(|e| Error::io(&name, e))?;
        Ok(FileDevice::new(file, name, size, false))
    }

    fn new(file: File, name: String, size: u64, is_block: bool) -> Self {
        let rotational = is_block && file.metadata().is_ok_and(|m| rotational(m.rdev()));
        FileDevice {
            file,
            name,
            size,
            is_block,
            rotational,
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
    /// file even if renamed since), once: for reading and writing, or for
    /// reading where the device is read-only; None where that is refused.
    fn direct_file(&self) -> Option<&Direct> {
        self.direct
            .get_or_init(|| {
                use std::os::fd::AsRawFd;
                let path = format!("/proc/self/fd/{}", self.file.as_raw_fd());
                let open = |w: bool| OpenOptions::new().read(true).write(w).custom_flags(libc::O_DIRECT).open(&path);
                match open(true).map(|file| Direct { file, writable: true }) {
                    Err(e) if e.raw_os_error() == Some(libc::EACCES) || e.raw_os_error() == Some(libc::EROFS) => {
                        open(false).map(|file| Direct { file, writable: false })
                    }
                    r => r,
                }
                .inspect_err(|e| {
                    tracing::debug!(device = %self.name, error = %e, "no direct I/O: the page cache takes it all");
                })
                .ok()
            })
            .as_ref()
    }

    /// Whether a request of `len` bytes at `offset` from or to `ptr` may
    /// go past the page cache: large enough, and aligned in memory, offset
    /// and length.
    fn direct_ok(ptr: *const u8, len: usize, offset: u64) -> bool {
        len >= UNCACHED_MIN
            && (ptr as usize).is_multiple_of(DIRECT_ALIGN)
            && len.is_multiple_of(DIRECT_ALIGN)
            && offset.is_multiple_of(DIRECT_ALIGN as u64)
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

/// A direct read has no host readahead to keep the disk busy: a long one
/// is cut into pieces of this size, read side by side.
const DIRECT_PIECE: usize = 1 << 20;
/// Pieces of one direct read in flight at once.
const DIRECT_QUEUE: usize = 8;

/// Reads `buf` at `offset` from `file` (opened with `O_DIRECT`; `buf`,
/// `offset` and the length aligned) in pieces of [`DIRECT_PIECE`], up to
/// [`DIRECT_QUEUE`] of them at once on threads of their own.
fn read_pieces(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    let n = buf.len().div_ceil(DIRECT_PIECE);
    if n < 2 {
        return file.read_exact_at(buf, offset);
    }
    let mut pieces: Vec<(u64, &mut [u8])> =
        buf.chunks_mut(DIRECT_PIECE).enumerate().map(|(i, c)| (offset + (i * DIRECT_PIECE) as u64, c)).collect();
    let lanes = n.min(DIRECT_QUEUE);
    let per = n.div_ceil(lanes);
    crate::helpers::scope(|s| {
        let mut rest = &mut pieces[..];
        let mut handles = Vec::with_capacity(lanes);
        while !rest.is_empty() {
            let (mine, tail) = rest.split_at_mut(per.min(rest.len()));
            rest = tail;
            handles.push(s.spawn(move || mine.iter_mut().try_for_each(|(at, piece)| file.read_exact_at(piece, *at))));
        }
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
    })
}

/// Whether the kernel calls block device `rdev` rotational (its queue's
/// `rotational` flag in sysfs; a partition's is its disk's). Unknown reads
/// as no. Image files are not asked: they are read through the host's page
/// cache, which reads ahead for them.
fn rotational(rdev: u64) -> bool {
    crate::numa::block_device_attr(rdev, "queue/rotational").is_some_and(|v| v.trim() == "1")
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
    fn seeks(&self) -> bool {
        self.rotational
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
    fn read_at_uncached(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let aligned = Self::direct_ok(buf.as_ptr(), buf.len(), offset);
        let in_file = offset.checked_add(buf.len() as u64).is_some_and(|end| end <= self.size);
        if let Some(d) = self.direct_file().filter(|_| aligned && in_file) {
            if self.check_gone(false) {
                return Err(self.gone_err());
            }
            match read_pieces(&d.file, buf, offset) {
                Ok(()) => return Ok(()),
                // An alignment the file system does not take, or an image
                // shorter than it should be: the plain read serves it, or
                // says what is wrong.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) || e.kind() == std::io::ErrorKind::UnexpectedEof => {}
                Err(e) => return self.guard(Err(Error::io(&self.name, e))),
            }
        }
        self.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        if self.check_gone(false) {
            return Err(self.gone_err());
        }
        let r = self.file.write_all_at(buf, offset).map_err(|e| self.write_err(e));
        self.guard(r)
    }
    fn write_at_uncached(&self, buf: &[u8], offset: u64) -> Result<()> {
        let aligned = Self::direct_ok(buf.as_ptr(), buf.len(), offset);
        if let Some(d) = self.direct_file().filter(|d| aligned && d.writable) {
            if self.check_gone(false) {
                return Err(self.gone_err());
            }
            match d.file.write_all_at(buf, offset) {
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

    /// Image files are read through the host's page cache: they do not
    /// count as seeking, whatever disk holds them. A block device counts
    /// as the kernel calls it; one sysfs does not know reads as not seeking.
    #[test]
    fn only_rotational_block_devices_seek() {
        let dir = tempfile::tempdir().unwrap();
        let dev = FileDevice::create(&dir.path().join("d.img"), 1 << 20).unwrap();
        assert!(!dev.seeks());
        assert!(!rotational(rustix::fs::makedev(4095, 1_048_575)), "no such device in sysfs");
        // Whatever this host's disks are, the flag is the kernel's.
        for e in std::fs::read_dir("/sys/block").into_iter().flatten().flatten() {
            let Ok(dev) = std::fs::read_to_string(e.path().join("dev")) else { continue };
            let Some((ma, mi)) = dev.trim().split_once(':') else { continue };
            let (Ok(ma), Ok(mi)) = (ma.parse(), mi.parse()) else { continue };
            let flag = std::fs::read_to_string(e.path().join("queue/rotational")).unwrap_or_default();
            assert_eq!(rotational(rustix::fs::makedev(ma, mi)), flag.trim() == "1", "{}", e.path().display());
        }
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

    /// Reads inside `base::from_media` (a scrub's) come from the file past
    /// the page cache, for its helper threads too, and see what a write
    /// through the cache left; other reads are cached as before.
    #[test]
    fn media_reads_bypass_the_page_cache_and_see_every_write() {
        use crate::device::DeviceHandle;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.img");
        let size = 16u64 << 20;
        let dev = Arc::new(FileDevice::create(&path, size).unwrap());
        let data = pattern(size as usize, 21);
        dev.write_at(&data, 0).unwrap();
        dev.flush().unwrap();
        rustix::fs::fadvise(&dev.file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        let h = DeviceHandle::new(0, dev.clone());
        let mut backing = vec![0u8; (1 << 20) + DIRECT_ALIGN];
        let at = backing.as_ptr().align_offset(DIRECT_ALIGN);
        let buf = &mut backing[at..at + (1 << 20)];
        let direct = dev.direct_file().is_some();
        if !direct {
            eprintln!("this file system refuses O_DIRECT: media reads go through the page cache");
        }
        crate::base::from_media(|| h.read_blocks(256, buf)).unwrap();
        assert!(buf[..] == data[1 << 20..2 << 20]);
        assert_eq!(cached(&dev.file, 1 << 20, 1 << 20), !direct, "a media read filled the page cache");
        // A helper started inside reads from the media too.
        let mut other = vec![0u8; (1 << 20) + DIRECT_ALIGN];
        let at2 = other.as_ptr().align_offset(DIRECT_ALIGN);
        let got = &mut other[at2..at2 + (1 << 20)];
        crate::base::from_media(|| crate::helpers::scope(|s| s.spawn(|| h.read_blocks(512, got)).join().unwrap()))
            .unwrap();
        assert!(got[..] == data[2 << 20..3 << 20]);
        assert_eq!(cached(&dev.file, 2 << 20, 1 << 20), !direct, "a helper's media read filled the page cache");
        // A write still in the page cache (not flushed) is what the media
        // read returns.
        let newer = pattern(1 << 20, 22);
        dev.write_at(&newer, 1 << 20).unwrap();
        crate::base::from_media(|| h.read_blocks(256, buf)).unwrap();
        assert!(buf[..] == newer[..], "a media read missed a cached write");
        // A long one is read in pieces side by side: every byte in place.
        // (Where no probe looked before: a read that must not wait starts
        // the host's readahead of what it did not find.)
        let long = (5 << 20) + 4096;
        let mut lb = vec![0u8; long + DIRECT_ALIGN];
        let at3 = lb.as_ptr().align_offset(DIRECT_ALIGN);
        let long_buf = &mut lb[at3..at3 + long];
        crate::base::from_media(|| h.read_blocks(2560, long_buf)).unwrap();
        assert!(long_buf[..] == data[10 << 20..(10 << 20) + long], "a long media read");
        assert_eq!(cached(&dev.file, 10 << 20, long), !direct);
        // Plain reads are cached; short media reads too.
        h.read_blocks(1024, buf).unwrap();
        assert!(cached(&dev.file, 4 << 20, 1 << 20));
        let mut small = vec![0u8; 8192];
        crate::base::from_media(|| h.read_blocks(1600, &mut small)).unwrap();
        assert_eq!(small[..], data[1600 * 4096..1602 * 4096]);
        // A read-only open reads from the media as well.
        drop(h);
        drop(dev);
        let ro = Arc::new(FileDevice::open(&path, false).unwrap());
        rustix::fs::fadvise(&ro.file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        let h = DeviceHandle::new(0, ro.clone());
        crate::base::from_media(|| h.read_blocks(768, buf)).unwrap();
        assert!(buf[..] == data[3 << 20..4 << 20]);
        assert_eq!(cached(&ro.file, 3 << 20, 1 << 20), !direct);
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
