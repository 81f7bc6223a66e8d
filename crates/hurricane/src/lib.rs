//! Hurricane: a file system whose files are compositions of building blocks
//! (the Hurricane File System design), over a pool of devices, with a
//! journalled meta-data store and a sharded namespace.

pub mod blocks;
pub mod codec;
pub mod device;
pub mod error;
pub mod layout;
pub mod pool;

pub use error::{Error, Result};
