//! Hurricane: a file system whose files are compositions of building blocks
//! (the Hurricane File System design), over a pool of devices, with a
//! journalled meta-data store and a sharded namespace.
//!
//! ```
//! use hurricane::{Fs, FormatOptions, Options, device::{Device, MemDevice}};
//! use std::{io::{Read, Write}, sync::Arc};
//!
//! // A pool of three 64 MiB devices (image files or block devices work the same way).
//! let devs: Vec<Arc<dyn Device>> =
//!     (0..3).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), 64 << 20)) as Arc<dyn Device>).collect();
//! Fs::format(devs.clone(), &FormatOptions::default())?;
//! let fs = Fs::open(devs, Options::default())?;
//!
//! // A file striped over all three devices in 64 KiB units.
//! let mut f = fs.create("/data.bin", Some("stripe(unit=64K,width=3)"))?;
//! f.write_all(&vec![7u8; 300_000])?;
//! f.sync_all()?;
//! assert_eq!(fs.layout_of("/data.bin")?, f.layout()?);
//!
//! let mut back = Vec::new();
//! fs.open_file("/data.bin")?.read_to_end(&mut back)?;
//! assert_eq!(back.len(), 300_000);
//! fs.close()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod blocks;
pub mod codec;
pub mod device;
pub mod error;
pub mod fs;
pub mod journal;
pub mod layout;
pub mod namespace;
pub mod pool;

pub use error::{Error, Result};
pub use fs::{Attr, DirItem, File, FormatOptions, Fs, OpenOptions, Options, RenameFlags, SetAttr, StatFs};
pub use namespace::Creds;
