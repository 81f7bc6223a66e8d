//! The per-device superblock. Blocks 0 and 1 of every device hold two slots;
//! each write goes to slot `generation % 2`, so a torn write leaves the other
//! slot intact. Every device carries the same pool-wide contents apart from
//! its own index, and opening takes the valid copy with the highest generation.

use crate::base::{Cursor, Region};
use crate::codec::{crc, Decoder, Encoder};
use crate::device::BLOCK_SIZE;
use crate::error::{Error, Result};

pub const MAGIC: u64 = u64::from_le_bytes(*b"HURRICAN");
/// On-disk format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 5;
/// The oldest format this build opens. Version 4 keeps the meta-data in an
/// indexed store in the meta-file (docs/FORMAT.md); versions 2 and 3 kept it
/// as one whole checkpoint and are refused by name. Version 5 writes layout
/// trees in a varint encoding that version-4 builds cannot read; this build
/// reads both, and the first writable open of a version-4 pool marks it 5.
pub const OLDEST_READABLE: u32 = 4;
/// The most device-state entries a superblock carries.
pub const MAX_DEV_STATES: usize = 256;
/// Blocks reserved at the start of every device (the two superblock slots).
pub const RESERVED_BLOCKS: u64 = 2;
/// The most devices a pool may have. Opening sizes tables by the device
/// count, so a count read from disk is held to this before anything is.
pub const MAX_DEVICES: u32 = 4096;
/// The largest generation and journal sequence number a superblock may
/// carry: each only ever counts up by one, so a value past this is damage,
/// and every later increment stays far from overflow.
pub const MAX_COUNTER: u64 = i64::MAX as u64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub version: u32,
    pub pool_id: [u8; 16],
    pub dev_index: u32,
    pub dev_count: u32,
    pub block_size: u32,
    /// Size of this device in blocks.
    pub dev_blocks: u64,
    pub generation: u64,
    pub journal: Region,
    /// Where replay starts, and the sequence number it expects there.
    pub cursor: Cursor,
    /// The meta-file: an encoded layout tree (replicate over extents) whose
    /// contents are the last checkpoint of the meta-data.
    pub meta_layout: Vec<u8>,
    pub meta_len: u64,
    pub meta_crc: u32,
    /// Set by a clean close; replay is skipped-cheap either way.
    pub clean: bool,
    /// Pool default layout spec for new files.
    pub default_layout: String,
    /// A second copy of the journal on another device (written with the
    /// first, replayed when the first is unreadable). Version 3.
    pub journal_mirror: Option<Region>,
    /// New files get a `checksum` block under every per-device leaf. Version 3.
    pub checksum: bool,
    /// Devices that are not simply online, with their persistent state
    /// (`DeviceState as u8`: removed, resilvering). Version 3.
    pub dev_states: Vec<(u32, u8)>,
}

impl Superblock {
    /// The superblock of a one-device pool in memory, for stores made by
    /// tests and fuzzing.
    pub fn scratch() -> Superblock {
        Superblock {
            version: FORMAT_VERSION,
            pool_id: [0; 16],
            dev_index: 0,
            dev_count: 1,
            block_size: BLOCK_SIZE as u32,
            dev_blocks: 0,
            generation: 0,
            journal: Region { dev: 0, start: RESERVED_BLOCKS, blocks: 16 },
            cursor: Cursor { tail: 0, head: 0, seq: 1 },
            meta_layout: Vec::new(),
            meta_len: 0,
            meta_crc: 0,
            clean: true,
            default_layout: "extent".into(),
            journal_mirror: None,
            checksum: false,
            dev_states: Vec::new(),
        }
    }

    pub fn encode(&self) -> Result<Vec<u8>> {
        let mut e = Encoder::with_capacity(BLOCK_SIZE);
        e.u64(MAGIC).u32(self.version).raw(&self.pool_id);
        e.u32(self.dev_index).u32(self.dev_count).u32(self.block_size).u64(self.dev_blocks);
        e.u64(self.generation);
        e.u32(self.journal.dev).u64(self.journal.start).u64(self.journal.blocks);
        e.u64(self.cursor.tail).u64(self.cursor.seq);
        e.bytes(&self.meta_layout).u64(self.meta_len).u32(self.meta_crc);
        e.u8(self.clean as u8).str(&self.default_layout);
        if self.version >= 3 {
            match self.journal_mirror {
                Some(m) => e.u32(m.dev).u64(m.start).u64(m.blocks),
                None => e.u32(u32::MAX).u64(0).u64(0),
            };
            e.u8(self.checksum as u8);
            e.u32(self.dev_states.len() as u32);
            for &(i, st) in &self.dev_states {
                e.u32(i).u8(st);
            }
        }
        if e.len() + 4 > BLOCK_SIZE {
            return Err(Error::NoSpace("superblock: meta-file layout too fragmented to record".into()));
        }
        let c = crc(&e.buf);
        e.u32(c);
        let mut b = e.into_inner();
        b.resize(BLOCK_SIZE, 0);
        Ok(b)
    }

    /// Decodes one slot. `Ok(None)` = not a Hurricane superblock at all.
    pub fn decode(b: &[u8], device: &str) -> Result<Option<Superblock>> {
        let mut d = Decoder::new(b, "superblock");
        if d.u64()? != MAGIC {
            return Ok(None);
        }
        let version = d.u32()?;
        if version < OLDEST_READABLE {
            return Err(Error::Invalid(format!(
                "{device}: pool format version {version} is older than this build reads ({OLDEST_READABLE}): \
                 its meta-data is one whole checkpoint, where this build keeps an indexed store; \
                 copy the files out with the build that made the pool"
            )));
        }
        if version > FORMAT_VERSION {
            return Err(Error::Device(format!(
                "{device}: format version {version} is newer than this build supports ({FORMAT_VERSION})"
            )));
        }
        let mut pool_id = [0u8; 16];
        pool_id.copy_from_slice(d.take(16)?);
        let dev_index = d.u32()?;
        let dev_count = d.u32()?;
        let block_size = d.u32()?;
        let dev_blocks = d.u64()?;
        let generation = d.u64()?;
        let journal = Region { dev: d.u32()?, start: d.u64()?, blocks: d.u64()? };
        let tail = d.u64()?;
        let seq = d.u64()?;
        let meta_layout = d.bytes()?.to_vec();
        let meta_len = d.u64()?;
        let meta_crc = d.u32()?;
        let clean = d.u8()? != 0;
        let default_layout = d.str()?.to_string();
        let (mut journal_mirror, mut checksum, mut dev_states) = (None, false, Vec::new());
        if version >= 3 {
            let (dev, start, blocks) = (d.u32()?, d.u64()?, d.u64()?);
            if dev != u32::MAX {
                journal_mirror = Some(Region { dev, start, blocks });
            }
            checksum = match d.u8()? {
                0 => false,
                1 => true,
                v => return Err(Error::corrupt(format!("superblock of {device}"), format!("checksum flag {v}"))),
            };
            let n = d.count(5)?;
            if n > MAX_DEV_STATES {
                return Err(Error::corrupt(format!("superblock of {device}"), format!("{n} device states")));
            }
            for _ in 0..n {
                dev_states.push((d.u32()?, d.u8()?));
            }
        }
        let end = d.pos();
        let stored = d.u32()?;
        if crc(&b[..end]) != stored {
            return Err(Error::corrupt(format!("superblock of {device}"), "checksum mismatch"));
        }
        let bad = |detail: String| Err(Error::corrupt(format!("superblock of {device}"), detail));
        if block_size as usize != BLOCK_SIZE {
            return bad(format!("block size {block_size}, expected {BLOCK_SIZE}"));
        }
        if dev_count == 0 || dev_count > MAX_DEVICES {
            return bad(format!("device count {dev_count} out of range (1..={MAX_DEVICES})"));
        }
        if dev_index >= dev_count {
            return bad(format!("device index {dev_index} is not below the device count {dev_count}"));
        }
        if dev_blocks < RESERVED_BLOCKS || dev_blocks.checked_mul(BLOCK_SIZE as u64).is_none() {
            return bad(format!("device size of {dev_blocks} blocks out of range"));
        }
        if generation > MAX_COUNTER {
            return bad(format!("generation {generation} out of range (at most {MAX_COUNTER})"));
        }
        if seq > MAX_COUNTER {
            return bad(format!("journal sequence number {seq} out of range (at most {MAX_COUNTER})"));
        }
        if journal.dev >= dev_count {
            return bad(format!("journal on device {} of a pool of {dev_count}", journal.dev));
        }
        let journal_end = journal.start.checked_add(journal.blocks);
        if journal.blocks == 0 || journal.start < RESERVED_BLOCKS || journal_end.is_none() {
            return bad(format!("journal region {}+{} blocks out of range", journal.start, journal.blocks));
        }
        if journal.dev == dev_index && journal_end.is_some_and(|e| e > dev_blocks) {
            return bad(format!(
                "journal region {}+{} blocks ends past the device's {dev_blocks} blocks",
                journal.start, journal.blocks
            ));
        }
        if let Some(m) = journal_mirror {
            if m.dev >= dev_count || m.dev == journal.dev || m.blocks != journal.blocks || m.start < RESERVED_BLOCKS {
                return bad(format!("journal mirror {}:{}+{} does not match the journal", m.dev, m.start, m.blocks));
            }
            if m.start.checked_add(m.blocks).is_none_or(|e| m.dev == dev_index && e > dev_blocks) {
                return bad(format!("journal mirror region {}+{} blocks out of range", m.start, m.blocks));
            }
        }
        for &(i, st) in &dev_states {
            if i >= dev_count || st == 0 || st > 5 {
                return bad(format!("state {st} for device {i} of {dev_count}"));
            }
        }
        if tail >= journal.blocks {
            return bad(format!("journal tail {tail} outside the journal's {} blocks", journal.blocks));
        }
        Ok(Some(Superblock {
            version,
            pool_id,
            dev_index,
            dev_count,
            block_size,
            dev_blocks,
            generation,
            journal,
            cursor: Cursor { tail, head: tail, seq },
            meta_layout,
            meta_len,
            meta_crc,
            clean,
            default_layout,
            journal_mirror,
            checksum,
            dev_states,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        Superblock {
            version: FORMAT_VERSION,
            pool_id: [7; 16],
            dev_index: 1,
            dev_count: 3,
            block_size: BLOCK_SIZE as u32,
            dev_blocks: 1000,
            generation: 5,
            journal: Region { dev: 0, start: 2, blocks: 100 },
            cursor: Cursor { tail: 3, head: 3, seq: 9 },
            meta_layout: vec![1, 2, 3],
            meta_len: 10,
            meta_crc: 42,
            clean: true,
            default_layout: "stripe".into(),
            journal_mirror: Some(Region { dev: 2, start: 2, blocks: 100 }),
            checksum: true,
            dev_states: vec![(2, 3)],
        }
    }

    #[test]
    fn round_trip_and_checksum() {
        let sb = sample();
        let b = sb.encode().unwrap();
        assert_eq!(Superblock::decode(&b, "d").unwrap(), Some(sb));
        let mut bad = b.clone();
        bad[30] ^= 1;
        assert!(Superblock::decode(&bad, "d").is_err());
        assert_eq!(Superblock::decode(&[0u8; BLOCK_SIZE], "d").unwrap(), None);
        let mut newer = sample();
        newer.version = FORMAT_VERSION + 1;
        let msg = Superblock::decode(&newer.encode().unwrap(), "d").unwrap_err().to_string();
        assert!(msg.contains("newer"), "{msg}");
    }

    #[test]
    fn device_states_are_held_to_the_persistent_ones() {
        for (st, ok) in [(0u8, false), (3, true), (4, true), (5, true), (6, false), (255, false)] {
            let mut sb = sample();
            sb.dev_states = vec![(2, st)];
            let r = Superblock::decode(&sb.encode().unwrap(), "d");
            assert_eq!(r.is_ok(), ok, "state {st}: {r:?}");
        }
        let mut sb = sample();
        sb.dev_states = vec![(3, 5)];
        let msg = Superblock::decode(&sb.encode().unwrap(), "d").unwrap_err().to_string();
        assert!(msg.contains("state 5 for device 3 of 3"), "{msg}");
    }

    #[test]
    fn pools_of_the_whole_checkpoint_formats_are_refused_by_name() {
        for v in [1, 2, 3] {
            let mut sb = sample();
            sb.version = v;
            let msg = Superblock::decode(&sb.encode().unwrap(), "d").unwrap_err().to_string();
            assert!(msg.contains(&format!("version {v} is older")) && msg.contains("indexed store"), "{msg}");
        }
    }
}
