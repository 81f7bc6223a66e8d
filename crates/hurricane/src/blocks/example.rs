//! `memory`: the example type of docs/ARCHITECTURE.md, "Adding a block
//! type". It keeps up to `blocks` file blocks in its own persistent state
//! (no device), which is enough to show every part of a type: its registry
//! entry, a constructor that trusts the framework's checks, state encoded and
//! decoded strictly, and records that the live path and replay apply with the
//! same code. It has no use in a pool, so it is not in [`super::TYPES`]: the
//! tests build it through a [`super::Registry`] of their own.

use super::common::span;
use super::{Block, BlockType, BuildArgs, IoCtx, ParamKind, ParamSpec, Params, Value, BLOCK_SIZE};
use crate::codec::{Decoder, Encoder};
use crate::error::{Error, Result};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;

// 1. The registry entry: name, parameters, shape, state version, constructor.
pub static TYPE: BlockType = BlockType {
    name: "memory",
    doc: "Up to `blocks` file blocks kept in the node's own state (an example type).",
    params: &[ParamSpec {
        key: "blocks",
        kind: ParamKind::Int,
        default: Some("4"),
        min: 1,
        max: 16,
        doc: "most file blocks held",
    }],
    per_device: false,
    min_children: 0,
    max_children: 0,
    distinct_devices: false,
    width_param: None,
    implied_width: None,
    state_version: Some(1),
    in_metadata: false,
    build,
};

struct Memory {
    id: u32,
    max: u64,
    /// file block -> its bytes (blocks of zeros are not kept).
    blocks: RwLock<BTreeMap<u64, Vec<u8>>>,
}

// 2. The type's record: one change to its state, encoded by the type itself.
enum Change {
    /// File block `fblk` now holds `data` (all zeros: drop it).
    Put { fblk: u64, data: Vec<u8> },
    /// Blocks at or past `from` are dropped.
    Truncate { from: u64 },
}

impl Change {
    fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        match self {
            Change::Put { fblk, data } => e.u8(1).u64(*fblk).bytes(data),
            Change::Truncate { from } => e.u8(2).u64(*from),
        };
        e.into_inner()
    }

    /// Strict: a record is exactly one change, in range.
    fn decode(b: &[u8], max: u64) -> Result<Change> {
        let mut d = Decoder::new(b, "memory record");
        let c = match d.u8()? {
            1 => Change::Put { fblk: d.u64()?, data: d.bytes()?.to_vec() },
            2 => Change::Truncate { from: d.u64()? },
            t => return Err(d.err(format!("unknown memory change {t}"))),
        };
        d.expect_end()?;
        if let Change::Put { fblk, data } = &c {
            if *fblk >= max || data.len() != BLOCK_SIZE {
                return Err(d.err(format!("block {fblk} of {} bytes (max {max} blocks)", data.len())));
            }
        }
        Ok(c)
    }

    // 3. One apply, for the live path and replay alike.
    fn apply(self, blocks: &mut BTreeMap<u64, Vec<u8>>) {
        match self {
            Change::Put { fblk, data } if data.iter().all(|&b| b == 0) => {
                blocks.remove(&fblk);
            }
            Change::Put { fblk, data } => {
                blocks.insert(fblk, data);
            }
            Change::Truncate { from } => {
                blocks.split_off(&from);
            }
        }
    }
}

// 4. The constructor: the framework has checked the parameters, children,
// device and state version; the type decodes its own state strictly.
fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    let max = a.params.num("blocks")?;
    let mut blocks = BTreeMap::new();
    if let Some(s) = a.state {
        let mut d = Decoder::new(s, "memory state");
        for _ in 0..d.count(12)? {
            let c = Change::Put { fblk: d.u64()?, data: d.bytes()?.to_vec() };
            Change::decode(&c.encode(), max)?.apply(&mut blocks);
        }
        d.expect_end()?;
    }
    Ok(Arc::new(Memory { id: a.id, max, blocks: RwLock::new(blocks) }))
}

impl Memory {
    /// Applies a change made by a request and journals it, under the lock
    /// so records reach the journal in the order the changes were made.
    fn change(&self, io: &IoCtx, blocks: &mut BTreeMap<u64, Vec<u8>>, c: Change) {
        io.record(&TYPE, self.id, &c.encode());
        c.apply(blocks);
    }
}

impl Block for Memory {
    fn id(&self) -> u32 {
        self.id
    }
    fn kind(&self) -> &'static BlockType {
        &TYPE
    }
    fn params(&self) -> Params {
        Params(BTreeMap::from([("blocks".to_string(), Value::Num(self.max))]))
    }

    fn read(&self, _io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()> {
        span(fblk, buf.len())?;
        let blocks = self.blocks.read();
        for (i, out) in buf.chunks_mut(BLOCK_SIZE).enumerate() {
            match blocks.get(&(fblk + i as u64)) {
                Some(b) => out.copy_from_slice(b),
                None => out.fill(0),
            }
        }
        Ok(())
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        if fblk + n > self.max {
            return Err(Error::TooBig(format!("memory block holds {} blocks", self.max)));
        }
        let mut blocks = self.blocks.write();
        for (i, data) in buf.chunks(BLOCK_SIZE).enumerate() {
            self.change(io, &mut blocks, Change::Put { fblk: fblk + i as u64, data: data.to_vec() });
        }
        Ok(())
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        let mut blocks = self.blocks.write();
        if blocks.range(nblocks..).next().is_some() {
            self.change(io, &mut blocks, Change::Truncate { from: nblocks });
        }
        Ok(())
    }

    fn encode_state(&self, e: &mut Encoder) {
        let blocks = self.blocks.read();
        e.u32(blocks.len() as u32);
        for (f, b) in blocks.iter() {
            e.u64(*f).bytes(b);
        }
    }

    fn apply(&self, payload: &[u8]) -> Result<()> {
        Change::decode(payload, self.max)?.apply(&mut self.blocks.write());
        Ok(())
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        self.blocks.read().range(fblk..).next().map(|(&f, _)| f)
    }

    fn capacity(&self) -> u64 {
        self.max
    }
}
