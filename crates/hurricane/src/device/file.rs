use super::Device;
use crate::error::{Error, Result};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// An image file or a block device, accessed with positioned reads and writes.
pub struct FileDevice {
    file: File,
    name: String,
    size: u64,
    is_block: bool,
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
        Ok(FileDevice { file, name, size, is_block: false })
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
        Ok(FileDevice { file, name, size, is_block })
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
            Ok(()) => Ok(()),
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
        // SAFETY: fallocate on an owned, open descriptor with plain integers.
        let rc = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if rc != 0 {
            tracing::debug!("{}: hole punch failed: {}", self.name, std::io::Error::last_os_error());
        }
        Ok(())
    }
}
