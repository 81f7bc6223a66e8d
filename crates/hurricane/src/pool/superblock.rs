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
pub const FORMAT_VERSION: u32 = 6;
/// The oldest format this build opens. Version 4 keeps the meta-data in an
/// indexed store in the meta-file (docs/FORMAT.md); versions 2 and 3 kept it
/// as one whole checkpoint and are refused by name. Version 5 writes layout
/// trees in a varint encoding that version-4 builds cannot read; this build
/// reads both, and the first writable open of a version-4 pool marks it 5.
/// Version 6 keeps any number of journal copies and the number of
/// meta-data copies the pool keeps, and writes journal records with an
/// epoch; a version-4 or 5 pool's first writable open marks it 6.
pub const OLDEST_READABLE: u32 = 4;
/// The most copies of the journal a superblock names.
pub const MAX_JOURNAL_COPIES: usize = 16;
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
    /// The journal's other copies, each on a device of its own (written
    /// with the first, merged with it on replay). Version 3 has at most
    /// one (its "mirror"), version 6 any number.
    pub journal_copies: Vec<Region>,
    /// New files get a `checksum` block under every per-device leaf. Version 3.
    pub checksum: bool,
    /// Devices that are not simply online, with their persistent state
    /// (`DeviceState as u8`: removed, resilvering). Version 3.
    pub dev_states: Vec<(u32, u8)>,
    /// The most device failures a file layout used in the pool survives,
    /// from which the number of meta-data copies (the meta-file's and the
    /// journal's) follows (`fs::meta_copies_wanted`), kept by the pool on
    /// distinct healthy devices; None when the pool keeps the meta-file
    /// layout given at mkfs as it is. Version 6 (a byte: 0 for None, else
    /// the count plus one); older pools have None until their first
    /// writable open sets it.
    pub meta_survives: Option<u8>,
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
            journal_copies: Vec::new(),
            checksum: false,
            dev_states: Vec::new(),
            meta_survives: None,
        }
    }

    /// Every copy of the journal, the first one first.
    pub fn journals(&self) -> Vec<Region> {
        std::iter::once(self.journal).chain(self.journal_copies.iter().copied()).collect()
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
            match self.journal_copies.first() {
                Some(m) => e.u32(m.dev).u64(m.start).u64(m.blocks),
                None => e.u32(u32::MAX).u64(0).u64(0),
            };
            e.u8(self.checksum as u8);
            e.u32(self.dev_states.len() as u32);
            for &(i, st) in &self.dev_states {
                e.u32(i).u8(st);
            }
        }
        if self.version >= 6 {
            let more = self.journal_copies.get(1..).unwrap_or_default();
            e.u32(more.len() as u32);
            for m in more {
                e.u32(m.dev).u64(m.start).u64(m.blocks);
            }
            e.u8(self.meta_survives.map_or(0, |t| t.saturating_add(1)));
        } else if self.journal_copies.len() > 1 {
            return Err(Error::Invalid(format!(
                "a version-{} superblock holds at most two journal copies",
                self.version
            )));
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
        let (mut journal_copies, mut checksum, mut dev_states) = (Vec::new(), false, Vec::new());
        let mut meta_survives = None;
        if version >= 3 {
            let (dev, start, blocks) = (d.u32()?, d.u64()?, d.u64()?);
            if dev != u32::MAX {
                journal_copies.push(Region { dev, start, blocks });
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
        if version >= 6 {
            let n = d.count(20)?;
            if n + 2 > MAX_JOURNAL_COPIES || (n > 0 && journal_copies.is_empty()) {
                return Err(Error::corrupt(format!("superblock of {device}"), format!("{n} more journal copies")));
            }
            for _ in 0..n {
                journal_copies.push(Region { dev: d.u32()?, start: d.u64()?, blocks: d.u64()? });
            }
            meta_survives = d.u8()?.checked_sub(1);
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
        for (k, m) in journal_copies.iter().enumerate() {
            let shared = m.dev == journal.dev || journal_copies[..k].iter().any(|o| o.dev == m.dev);
            if m.dev >= dev_count || shared || m.blocks != journal.blocks || m.start < RESERVED_BLOCKS {
                return bad(format!("journal copy {}:{}+{} does not match the journal", m.dev, m.start, m.blocks));
            }
            if m.start.checked_add(m.blocks).is_none_or(|e| m.dev == dev_index && e > dev_blocks) {
                return bad(format!("journal copy region {}+{} blocks out of range", m.start, m.blocks));
            }
        }
        if meta_survives.is_some_and(|t| t > 16) {
            return bad(format!("meta-data policy for layouts surviving {meta_survives:?} failures"));
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
            journal_copies,
            checksum,
            dev_states,
            meta_survives,
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
            journal_copies: vec![Region { dev: 2, start: 2, blocks: 100 }, Region { dev: 1, start: 9, blocks: 100 }],
            checksum: true,
            dev_states: vec![(2, 3)],
            meta_survives: Some(2),
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
    fn journal_copies_and_the_meta_policy_round_trip_and_are_checked() {
        // Version 5 holds one other copy and no policy; version 6 any
        // number of copies, each on a device of its own, and the policy.
        let mut v5 = sample();
        v5.version = 5;
        assert!(v5.encode().is_err(), "two other copies in a version-5 superblock");
        v5.journal_copies.truncate(1);
        v5.meta_survives = None;
        assert_eq!(Superblock::decode(&v5.encode().unwrap(), "d").unwrap(), Some(v5));
        let mut none = sample();
        none.meta_survives = None;
        assert_eq!(Superblock::decode(&none.encode().unwrap(), "d").unwrap(), Some(none));
        for (what, f) in [
            (
                "a copy on the journal's device",
                Box::new(|s: &mut Superblock| s.journal_copies[1].dev = 0) as Box<dyn Fn(&mut Superblock)>,
            ),
            ("two copies on one device", Box::new(|s: &mut Superblock| s.journal_copies[1].dev = 2)),
            ("a copy of another size", Box::new(|s: &mut Superblock| s.journal_copies[1].blocks = 99)),
            ("a copy past the devices", Box::new(|s: &mut Superblock| s.journal_copies[1].dev = 3)),
        ] {
            let mut sb = sample();
            f(&mut sb);
            let msg = Superblock::decode(&sb.encode().unwrap(), "d").unwrap_err().to_string();
            assert!(msg.contains("journal copy"), "{what}: {msg}");
        }
        let mut sb = sample();
        sb.meta_survives = Some(40);
        assert!(Superblock::decode(&sb.encode().unwrap(), "d").is_err());
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
            sb.journal_copies.truncate(1);
            let msg = Superblock::decode(&sb.encode().unwrap(), "d").unwrap_err().to_string();
            assert!(msg.contains(&format!("version {v} is older")) && msg.contains("indexed store"), "{msg}");
        }
    }
}
