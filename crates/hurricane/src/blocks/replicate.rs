//! `replicate`: every child holds a full copy. Writes go to all of them; a
//! read goes to one, chosen by the `read` policy, and falls back to the others
//! when that copy fails, so a file survives the loss of all but one replica.

use super::common::{dispatch, span};
use super::{Block, BlockType, BuildArgs, IoCtx, ParamKind, ParamSpec, Params, Value};
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

const POLICIES: &[&str] = &["least-loaded", "nearest", "primary"];

pub static TYPE: BlockType = BlockType {
    name: "replicate",
    doc: "N full copies, one per child; reads pick a copy by policy and survive failed copies.",
    params: &[
        ParamSpec { key: "copies", kind: ParamKind::Int, default: None, min: 1, max: 16, doc: "number of copies (children)" },
        ParamSpec {
            key: "read",
            kind: ParamKind::Choice(POLICIES),
            default: Some("least-loaded"),
            min: 0,
            max: 0,
            doc: "which copy serves reads: least-loaded (fewest requests in flight on its devices), nearest, or primary (the first)",
        },
    ],
    per_device: false,
    min_children: 1,
    max_children: 16,
    distinct_devices: false,
    width_param: Some("copies"),
    state_version: None,
    in_metadata: false,
    build,
};

/// Writes at least this long go to the copies in parallel (smaller ones are
/// cheaper than a thread start).
const PARALLEL_MIN_BLOCKS: u64 = 64; // 256 KiB

#[derive(Clone, Copy, PartialEq, Eq)]
enum Policy {
    LeastLoaded,
    /// Every device is treated as one NUMA node for now, so this is `Primary`.
    Nearest,
    Primary,
}

struct Replicate {
    id: u32,
    policy: Policy,
    children: Vec<Arc<dyn Block>>,
    /// Devices under each child, found once at build for the load comparison.
    devices: Vec<Vec<u32>>,
    /// Breaks ties between equally loaded copies in turn.
    next: AtomicUsize,
}

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    let policy = match a.params.word("read")? {
        "least-loaded" => Policy::LeastLoaded,
        "nearest" => Policy::Nearest,
        "primary" => Policy::Primary,
        w => return Err(Error::Layout(format!("replicate: unknown read policy {w:?}"))),
    };
    let devices = a
        .children
        .iter()
        .map(|c| {
            let mut devs = Vec::new();
            collect_devices(c, &mut devs);
            devs.sort_unstable();
            devs.dedup();
            devs
        })
        .collect();
    Ok(Arc::new(Replicate { id: a.id, policy, children: a.children, devices, next: AtomicUsize::new(0) }))
}

fn collect_devices(b: &Arc<dyn Block>, out: &mut Vec<u32>) {
    out.extend(b.device());
    for c in b.children() {
        collect_devices(c, out);
    }
}

impl Replicate {
    /// The copy a read should try first.
    fn pick(&self, io: &IoCtx) -> usize {
        match self.policy {
            Policy::Primary | Policy::Nearest => 0,
            Policy::LeastLoaded => {
                let n = self.children.len();
                let start = self.next.fetch_add(1, Relaxed) % n;
                let load = |c: usize| -> u64 {
                    self.devices[c]
                        .iter()
                        .filter_map(|&d| io.storage.devs.get(d as usize))
                        .map(|h| h.stats.load())
                        .sum()
                };
                // Strictly lower load wins, so equal loads go to `start`, which rotates.
                (0..n).map(|i| (start + i) % n).min_by_key(|&c| load(c)).unwrap_or(0)
            }
        }
    }
}

impl Block for Replicate {
    fn id(&self) -> u32 {
        self.id
    }
    fn kind(&self) -> &'static BlockType {
        &TYPE
    }
    fn params(&self) -> Params {
        let mut p = Params::default();
        p.0.insert("copies".into(), Value::Num(self.children.len() as u64));
        let read = match self.policy {
            Policy::LeastLoaded => "least-loaded",
            Policy::Nearest => "nearest",
            Policy::Primary => "primary",
        };
        p.0.insert("read".into(), Value::Word(read.into()));
        p
    }
    fn children(&self) -> &[Arc<dyn Block>] {
        &self.children
    }

    fn read(&self, io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()> {
        span(fblk, buf.len())?;
        let first = self.pick(io);
        let n = self.children.len();
        let mut err = None;
        for c in (0..n).map(|i| (first + i) % n) {
            match self.children[c].read(io, fblk, buf) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::warn!(node = self.id, copy = c, error = %e, "replica read failed, trying another copy");
                    err.get_or_insert(e);
                }
            }
        }
        Err(err.unwrap_or_else(|| Error::Device("replicate: no copies".into())))
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        let groups = (0..self.children.len()).map(|c| (c, vec![(fblk, buf)])).collect();
        let parallel = n >= PARALLEL_MIN_BLOCKS;
        dispatch(groups, parallel, &|c, fblk, piece: &[u8]| self.children[c].write(io, fblk, piece))
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        let mut res = Ok(());
        for child in &self.children {
            let r = child.truncate(io, nblocks);
            if res.is_ok() {
                res = r;
            }
        }
        res
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        self.children.iter().filter_map(|c| c.next_data(fblk)).min()
    }

    fn capacity(&self) -> u64 {
        self.children.iter().map(|c| c.capacity()).min().unwrap_or(u64::MAX)
    }
}
