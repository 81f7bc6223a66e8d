//! `inline`: a small file's data kept in its meta-data record instead of on a
//! device of its own (HFS small-data blocks, C-FFS embedded data). Reading it
//! costs no device request beyond the meta-data, and many such files pack into
//! one meta-file block. Holds at most `max` bytes, all in file block 0.

use super::stripe::{check_args, span};
use super::{Block, BlockType, BuildArgs, IoCtx, MapChange, ParamKind, ParamSpec, Params, BLOCK_SIZE};
use crate::codec::{Decoder, Encoder};
use crate::error::{Error, Result};
use crate::layout::Value;
use parking_lot::RwLock;
use std::sync::Arc;

pub static TYPE: BlockType = BlockType {
    name: "inline",
    doc: "Small data kept with the file's meta-data (at most `max` bytes, in file block 0).",
    params: &[ParamSpec {
        key: "max",
        kind: ParamKind::Size,
        default: Some("2K"),
        min: 0,
        max: BLOCK_SIZE as u64,
        doc: "most bytes held",
    }],
    per_device: false,
    min_children: 0,
    max_children: 0,
    distinct_devices: false,
    width_param: None,
    build,
};

struct Inline {
    id: u32,
    max: usize,
    /// The first bytes of file block 0, trailing zeros trimmed (they read back
    /// as zeros anyway, and the record stays as small as the data).
    data: RwLock<Vec<u8>>,
}

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    check_args(&TYPE, &a)?;
    let max = a.params.num("max")? as usize;
    let data = match a.state {
        None => Vec::new(),
        Some(s) => {
            let mut d = Decoder::new(s, "inline block");
            let data = d.bytes()?;
            d.expect_end()?;
            if data.len() > max {
                return Err(d.err(format!("{} bytes of data, more than max={max}", data.len())));
            }
            trimmed(data).to_vec()
        }
    };
    Ok(Arc::new(Inline { id: a.id, max, data: RwLock::new(data) }))
}

fn trimmed(b: &[u8]) -> &[u8] {
    let end = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
    &b[..end]
}

impl Inline {
    fn too_big(&self) -> Error {
        Error::TooBig(format!("inline block holds at most {} bytes", self.max))
    }
}

impl Block for Inline {
    fn id(&self) -> u32 {
        self.id
    }
    fn kind(&self) -> &'static BlockType {
        &TYPE
    }
    fn params(&self) -> Params {
        let mut p = Params::default();
        p.0.insert("max".into(), Value::Num(self.max as u64));
        p
    }

    fn read(&self, _io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()> {
        span(fblk, buf.len())?;
        buf.fill(0);
        if fblk == 0 {
            let d = self.data.read();
            let n = d.len().min(buf.len());
            buf[..n].copy_from_slice(&d[..n]);
        }
        Ok(())
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        span(fblk, buf.len())?;
        // Only zeros may lie past `max`: they are what a hole reads as, so
        // writing them changes nothing.
        let limit = if fblk == 0 { self.max.min(buf.len()) } else { 0 };
        if buf[limit..].iter().any(|&b| b != 0) {
            return Err(self.too_big());
        }
        if fblk != 0 || buf.is_empty() {
            return Ok(());
        }
        let new = trimmed(&buf[..limit]);
        let mut d = self.data.write();
        if *d != new {
            d.clear();
            d.extend_from_slice(new);
            // Recorded under the lock so records reach the journal in the order
            // the changes were made.
            io.record(MapChange::Inline { node: self.id, data: d.clone() });
        }
        Ok(())
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        let mut d = self.data.write();
        if nblocks == 0 && !d.is_empty() {
            d.clear();
            io.record(MapChange::Inline { node: self.id, data: Vec::new() });
        }
        Ok(())
    }

    fn encode_state(&self, e: &mut Encoder) {
        e.bytes(&self.data.read());
    }

    fn apply(&self, c: &MapChange) -> Result<()> {
        match c {
            MapChange::Inline { data, .. } if data.len() <= self.max => {
                *self.data.write() = trimmed(data).to_vec();
                Ok(())
            }
            MapChange::Inline { data, .. } => Err(Error::corrupt(
                "journal",
                format!("inline node {} given {} bytes, max {}", self.id, data.len(), self.max),
            )),
            other => Err(Error::corrupt("journal", format!("inline block cannot apply {other:?}"))),
        }
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        (fblk == 0 && !self.data.read().is_empty()).then_some(0)
    }

    fn capacity(&self) -> u64 {
        u64::from(self.max > 0)
    }
}
