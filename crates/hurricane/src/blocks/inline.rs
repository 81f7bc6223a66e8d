//! `inline`: a small file's data kept in its meta-data record instead of on a
//! device of its own (HFS small-data blocks, C-FFS embedded data). Reading it
//! costs no device request beyond the meta-data, and many such files pack into
//! one meta-file block. Holds at most `max` bytes, all in file block 0.

use super::common::span;
use super::{Block, BlockType, BuildArgs, IoCtx, ParamKind, ParamSpec, Params, Value, BLOCK_SIZE};
use crate::codec::{Decoder, Encoder};
use crate::error::{Error, Result};
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
    implied_width: None,
    state_version: Some(1),
    in_metadata: true,
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
    let max = a.params.num("max")? as usize;
    let data = match a.state {
        None => Vec::new(),
        Some(s) => decode_data(s, "inline block", max)?.to_vec(),
    };
    Ok(Arc::new(Inline { id: a.id, max, data: RwLock::new(data) }))
}

/// The node's state and its only record are the same: the bytes it holds,
/// length-prefixed (at most `max`, trailing zeros trimmed, nothing after).
fn decode_data<'a>(b: &'a [u8], what: &'static str, max: usize) -> Result<&'a [u8]> {
    let mut d = Decoder::new(b, what);
    let data = d.bytes()?;
    d.expect_end()?;
    if data.len() > max {
        return Err(d.err(format!("{} bytes of data, more than max={max}", data.len())));
    }
    if data.last() == Some(&0) {
        return Err(d.err("data with trailing zeros (they are trimmed when stored)"));
    }
    Ok(data)
}

fn trimmed(b: &[u8]) -> &[u8] {
    let end = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
    &b[..end]
}

impl Inline {
    /// Sets the held bytes and journals the change, through the same
    /// decode-and-apply as replay. Called under the data lock, so records
    /// reach the journal in the order the changes were made.
    fn set(&self, io: &IoCtx, d: &mut Vec<u8>, new: &[u8]) -> Result<()> {
        let mut e = Encoder::new();
        e.bytes(new);
        let rec = e.into_inner();
        *d = decode_data(&rec, "inline record", self.max)?.to_vec();
        io.record(&TYPE, self.id, &rec);
        Ok(())
    }

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
            self.set(io, &mut d, new)?;
        }
        Ok(())
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        let mut d = self.data.write();
        if nblocks == 0 && !d.is_empty() {
            self.set(io, &mut d, &[])?;
        }
        Ok(())
    }

    fn encode_state(&self, e: &mut Encoder) {
        e.bytes(&self.data.read());
    }

    fn apply(&self, payload: &[u8]) -> Result<()> {
        let data = decode_data(payload, "inline record", self.max)
            .map_err(|e| Error::corrupt("journal", format!("inline node {}: {e}", self.id)))?;
        *self.data.write() = data.to_vec();
        Ok(())
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        (fblk == 0 && !self.data.read().is_empty()).then_some(0)
    }

    fn capacity(&self) -> u64 {
        u64::from(self.max > 0)
    }
}
