//! One error type for the engine. Every failure that depends on disk contents
//! or user input is an `Error`, never a panic.

use std::io;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("I/O error: {0}")]
    RawIo(#[from] io::Error),
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: String, detail: String },
    #[error("layout: {0}")]
    Layout(String),
    #[error("device {0}")]
    Device(String),
    /// Data read back does not match the checksum kept for it: never
    /// returned as data (EIO upward).
    #[error("checksum mismatch: {0}")]
    Checksum(String),
    #[error("no space left on device {0}")]
    NoSpace(String),
    #[error("{0}: no such file or directory")]
    NotFound(String),
    #[error("{0}: file exists")]
    Exists(String),
    #[error("{0}: not a directory")]
    NotDir(String),
    #[error("{0}: is a directory")]
    IsDir(String),
    #[error("{0}: directory not empty")]
    NotEmpty(String),
    #[error("{0}: permission denied")]
    Access(String),
    #[error("{0}: operation not permitted")]
    Perm(String),
    #[error("{0}: invalid argument")]
    Invalid(String),
    #[error("{0}: file name too long")]
    NameTooLong(String),
    #[error("{0}: too many levels of symbolic links")]
    Loop(String),
    #[error("{0}: no such attribute")]
    NoAttr(String),
    #[error("{0}: attribute value too large for buffer")]
    Range(String),
    #[error("{0}: file too large")]
    TooBig(String),
    #[error("{0}: too many links")]
    TooManyLinks(String),
    #[error("{0}: read-only file system")]
    ReadOnly(String),
    #[error("{0}: not supported")]
    NotSupported(String),
    #[error("{0}: stale handle")]
    Stale(String),
    #[error("{0}: would block")]
    WouldBlock(String),
    /// A lock request of a transaction would have closed a cycle of
    /// waiting transactions: the requester is aborted (EDEADLK).
    #[error("{0}: resource deadlock avoided")]
    Deadlock(String),
    /// A lock request made where it may not wait (a mount's serving
    /// thread) found the range locked: nothing was changed, and the request
    /// may be made again where it can wait (EAGAIN if it reaches a caller).
    #[error("{0}: locked")]
    LockWait(String),
    /// A bound on memory was reached: transactions' buffered bytes, or
    /// their number, for one user or the whole pool (ENOMEM).
    #[error("{0}: cannot allocate memory")]
    NoMemory(String),
    /// Held by another user: a pool another host is writing (EBUSY).
    #[error("{0}")]
    Busy(String),
}

impl Error {
    pub fn corrupt(what: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::Corrupt { what: what.into(), detail: detail.into() }
    }

    pub fn io(path: impl Into<String>, source: io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    /// A device that did not answer in time (a device over the network):
    /// trying more of the same request would wait out the same timeout.
    pub fn is_timed_out(&self) -> bool {
        matches!(self, Error::Io { source, .. } | Error::RawIo(source) if source.kind() == io::ErrorKind::TimedOut)
    }

    /// The POSIX error number a file-system client should see.
    pub fn errno(&self) -> i32 {
        use Error::*;
        match self {
            Io { source, .. } | RawIo(source) => source.raw_os_error().unwrap_or(libc::EIO),
            Corrupt { .. } | Device(_) | Checksum(_) => libc::EIO,
            Layout(_) | Invalid(_) => libc::EINVAL,
            NoSpace(_) => libc::ENOSPC,
            NotFound(_) => libc::ENOENT,
            Exists(_) => libc::EEXIST,
            NotDir(_) => libc::ENOTDIR,
            IsDir(_) => libc::EISDIR,
            NotEmpty(_) => libc::ENOTEMPTY,
            Access(_) => libc::EACCES,
            Perm(_) => libc::EPERM,
            NameTooLong(_) => libc::ENAMETOOLONG,
            Loop(_) => libc::ELOOP,
            NoAttr(_) => libc::ENODATA,
            Range(_) => libc::ERANGE,
            TooBig(_) => libc::EFBIG,
            TooManyLinks(_) => libc::EMLINK,
            ReadOnly(_) => libc::EROFS,
            NotSupported(_) => libc::EOPNOTSUPP,
            Stale(_) => libc::ESTALE,
            WouldBlock(_) | LockWait(_) => libc::EAGAIN,
            NoMemory(_) => libc::ENOMEM,
            Deadlock(_) => libc::EDEADLK,
            Busy(_) => libc::EBUSY,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        match e {
            Error::Io { source, .. } | Error::RawIo(source) => source,
            other => io::Error::from_raw_os_error(other.errno()),
        }
    }
}
