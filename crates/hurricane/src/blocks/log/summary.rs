//! Segment summaries and the chain that roll-forward follows.
//!
//! A plain write to a `log` (not a transaction's commit, not the cleaner's
//! move) is a *partial segment*: one summary block, then the data. The
//! summary says which node of which file the data blocks hold, and carries
//! a crc32c of them, so a crash that cut the write short shows. Pieces
//! follow each other at the head; the piece that spends the head's run
//! takes the next run (`then`) and names it in its summary, and the next
//! piece starts there. From a place the journal recorded (an [`Anchor`], written
//! at every commit that moved the head), recovery can therefore walk
//! forward through every plain write made after that commit, in the order
//! they were placed, and stop at the first block that is not the next
//! summary of the chain or whose data does not match it.
//!
//! Each anchor carries a fresh random *nonce* that the summaries written
//! after it repeat. The blocks ahead of the head held anything before the
//! head took them (other files' old data, older summaries); a block there
//! that looks like a summary but lacks the nonce, which never leaves the
//! journal and the log's own blocks, ends the walk. Blocks behind the head
//! are not handed to anyone else before the commit after them: what a write
//! gives back is freed only once its batch commits, and by then a newer
//! anchor stands past it.
//!
//! The format is in docs/FORMAT.md ("Log segment summaries").

use crate::base::BLOCK_SIZE;
use crate::codec::{Decoder, Encoder};
use crate::device::DeviceHandle;
use crate::pool::Allocator;

pub const MAGIC: &[u8; 8] = b"HLOGSUM1";

/// Bytes of a summary the header crc covers (everything before it).
const CRC_AT: usize = 92;

/// One summary block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// The nonce of the anchor before it.
    pub nonce: u64,
    /// Place in the order of all pieces written since the pool opened
    /// (pieces on several devices are rolled forward in this order).
    pub order: u64,
    pub ino: u64,
    /// The `log` node's preorder id in the file's layout.
    pub node: u32,
    /// The node's segment size (blocks): which head wrote it.
    pub seg: u64,
    /// First node block the data holds.
    pub fblk: u64,
    /// Data blocks that follow the summary.
    pub len: u64,
    /// End of the head's run this piece lies in.
    pub run_end: u64,
    /// The run the head goes on to, (start, length).
    pub then: Option<(u64, u64)>,
    /// crc32c of the data blocks.
    pub data_crc: u32,
}

impl Summary {
    /// The block as written.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::with_capacity(BLOCK_SIZE);
        let (ts, tl) = self.then.unwrap_or((0, 0));
        e.raw(MAGIC).u64(self.nonce).u64(self.order).u64(self.ino).u32(self.node).u32(0);
        e.u64(self.seg).u64(self.fblk).u64(self.len).u64(self.run_end).u64(ts).u64(tl).u32(self.data_crc);
        let crc = crate::codec::crc(&e.buf);
        e.u32(crc);
        let mut b = e.into_inner();
        b.resize(BLOCK_SIZE, 0);
        b
    }

    /// The summary a block holds, or None when it holds none (wrong magic,
    /// bad crc, bytes after the header that are not zero, impossible
    /// values): to the walk, the end of the chain.
    pub fn decode(b: &[u8]) -> Option<Summary> {
        if b.len() != BLOCK_SIZE || &b[..8] != MAGIC || b[CRC_AT + 4..].iter().any(|&x| x != 0) {
            return None;
        }
        let mut d = Decoder::new(&b[8..CRC_AT + 4], "log summary");
        let s = (|| -> crate::error::Result<Summary> {
            let nonce = d.u64()?;
            let order = d.u64()?;
            let ino = d.u64()?;
            let node = d.u32()?;
            if d.u32()? != 0 {
                return Err(d.err("reserved bytes are not zero"));
            }
            let (seg, fblk, len, run_end, ts, tl) = (d.u64()?, d.u64()?, d.u64()?, d.u64()?, d.u64()?, d.u64()?);
            let data_crc = d.u32()?;
            Ok(Summary {
                nonce,
                order,
                ino,
                node,
                seg,
                fblk,
                len,
                run_end,
                then: (tl > 0).then_some((ts, tl)),
                data_crc,
            })
        })()
        .ok()?;
        let crc = u32::from_le_bytes(b[CRC_AT..CRC_AT + 4].try_into().ok()?);
        (crc == crate::codec::crc(&b[..CRC_AT]) && s.len > 0 && s.seg > 0).then_some(s)
    }
}

/// crc32c of `n` blocks of zeros (a zeroing write's data).
pub fn zeros_crc(n: u64) -> u32 {
    static ZERO: [u8; BLOCK_SIZE] = [0; BLOCK_SIZE];
    (0..n).fold(0, |c, _| crc32c::crc32c_append(c, &ZERO))
}

/// A head's place as a journal record left it: where the next piece goes,
/// the end of that run, the run after it, and the nonce of what follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    pub dev: u32,
    pub seg: u64,
    pub next: u64,
    pub end: u64,
    pub then: Option<(u64, u64)>,
    pub nonce: u64,
}

/// A piece the walk found: its summary block and what it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub dev: u32,
    /// The summary block; the data follows it.
    pub at: u64,
    pub sum: Summary,
}

/// Blocks read at once while checking a piece's data.
const STEP: u64 = 256;

/// Walks the chain from `a`. Every block it reads must be free in `alloc`
/// (nothing the committed meta-data names): it is taken there, and noted in
/// `claimed`, so that nothing is written over it before the pieces are
/// rolled forward (the caller frees `claimed` afterwards).
pub fn walk(dev: &DeviceHandle, alloc: &Allocator, a: &Anchor, claimed: &mut Vec<(u64, u64)>) -> Vec<Found> {
    let mut out = Vec::new();
    let (mut p, mut end, mut then) = (a.next, a.end, a.then);
    let total = alloc.total_blocks();
    let mut blk = vec![0u8; BLOCK_SIZE];
    let mut data = Vec::new();
    loop {
        if end.saturating_sub(p) < 2 {
            // Too short for a summary and data: the head went on to `then`.
            match then.take() {
                Some((s, l)) if l >= 2 && s.checked_add(l).is_some_and(|e| e <= total) => (p, end) = (s, s + l),
                _ => break,
            }
            continue;
        }
        if p >= total || end > total || !alloc.take_if_free(p, 1) {
            break;
        }
        claimed.push((p, 1));
        if dev.read_blocks(p, &mut blk).is_err() {
            break;
        }
        let Some(s) = Summary::decode(&blk) else { break };
        if s.nonce != a.nonce || s.seg != a.seg || s.run_end != end || s.len > end - p - 1 {
            break;
        }
        if !alloc.take_if_free(p + 1, s.len) {
            break;
        }
        claimed.push((p + 1, s.len));
        let mut crc = 0u32;
        let mut at = p + 1;
        let mut ok = true;
        while at < p + 1 + s.len {
            let n = (p + 1 + s.len - at).min(STEP);
            data.resize(n as usize * BLOCK_SIZE, 0);
            if dev.read_blocks(at, &mut data).is_err() {
                ok = false;
                break;
            }
            crc = crc32c::crc32c_append(crc, &data);
            at += n;
        }
        if !ok || crc != s.data_crc {
            break;
        }
        out.push(Found { dev: a.dev, at: p, sum: s });
        then = s.then;
        p += 1 + s.len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Summary {
        Summary {
            nonce: 0x1234_5678_9abc_def0,
            order: 7,
            ino: 42,
            node: 1,
            seg: 256,
            fblk: 10,
            len: 3,
            run_end: 5000,
            then: Some((8000, 256)),
            data_crc: 0xdead_beef,
        }
    }

    #[test]
    fn a_summary_round_trips_and_any_changed_byte_is_refused() {
        let s = sample();
        let b = s.encode();
        assert_eq!(b.len(), BLOCK_SIZE);
        assert_eq!(Summary::decode(&b), Some(s));
        for i in [0, 8, 30, 60, 91, 93, 200, BLOCK_SIZE - 1] {
            let mut x = b.clone();
            x[i] ^= 0x40;
            assert_eq!(Summary::decode(&x), None, "byte {i} changed");
        }
        assert_eq!(Summary::decode(&b[..100]), None);
        assert_eq!(Summary::decode(&[0u8; BLOCK_SIZE]), None);
        assert_eq!(Summary::decode(&Summary { then: None, ..s }.encode()).map(|x| x.then), Some(None));
        assert_eq!(Summary::decode(&Summary { len: 0, ..s }.encode()), None);
    }

    #[test]
    fn zeros_crc_is_the_crc_of_zero_blocks() {
        assert_eq!(zeros_crc(3), crc32c::crc32c(&vec![0u8; 3 * BLOCK_SIZE]));
        assert_eq!(zeros_crc(0), 0);
    }
}
