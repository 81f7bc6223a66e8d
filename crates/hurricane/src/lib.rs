//! Hurricane: a file system whose files are compositions of building blocks
//! (the Hurricane File System design), over a pool of devices, with a
//! journalled meta-data store and a sharded namespace.
//!
//! ```
//! use hurricane::{Fs, FormatOptions, Options, device::{Device, MemDevice}};
//! use std::io::{Read, Seek, SeekFrom, Write};
//! use std::sync::Arc;
//!
//! // A pool of three 64 MiB devices. Image files and block devices work the
//! // same way: `Fs::mkfs_dir(dir, 3, size, ..)` then `Fs::open_dir(dir, ..)`.
//! let devs: Vec<Arc<dyn Device>> =
//!     (0..3).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), 64 << 20)) as Arc<dyn Device>).collect();
//! Fs::format(devs.clone(), &FormatOptions::default())?;
//! let fs = Fs::open(devs, Options::default())?;
//!
//! // A file striped over all three devices in 64 KiB units.
//! fs.mkdir_all("/data", 0o755)?;
//! let mut f = fs.create("/data/a.bin", Some("stripe(unit=64K,width=3)"))?;
//! f.write_all(&vec![7u8; 300_000])?;          // std::io::Write at the cursor
//! f.write_at(b"head", 0)?;                   // positioned, safe from many threads
//! f.sync_all()?;                             // data and meta-data durable
//! assert!(f.layout()?.starts_with("stripe(unit=64K)[extent@"));
//!
//! // Read it back through the cursor and positioned reads.
//! let mut r = fs.open_file("/data/a.bin")?;
//! r.seek(SeekFrom::Start(299_996))?;
//! let mut tail = Vec::new();
//! r.read_to_end(&mut tail)?;
//! assert_eq!(tail, [7, 7, 7, 7]);
//! let mut head = [0u8; 4];
//! r.read_at(&mut head, 0)?;
//! assert_eq!(&head, b"head");
//!
//! // Namespace: rename, readdir, stat.
//! fs.rename_path("/data/a.bin", "/data/b.bin")?;
//! let names: Vec<String> = fs.read_dir("/data")?.iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()).collect();
//! assert_eq!(names, ["b.bin"]);
//! assert_eq!(fs.stat("/data/b.bin")?.size, 300_000);
//! drop((f, r));
//! fs.close()?;                               // checkpoint, clean shutdown
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod base;
pub mod blocks;
pub mod cache;
pub mod codec;
pub mod crashtest;
pub mod device;
pub mod error;
pub mod fs;
pub mod fsck;
pub mod journal;
pub mod layout;
pub mod namespace;
pub mod open;
pub mod pool;

pub use error::{Error, Result};
pub use fs::{Attr, DirItem, File, FormatOptions, Fs, OpenOptions, Options, RenameFlags, SetAttr, StatFs};
pub use namespace::Creds;
