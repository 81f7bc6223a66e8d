//! Physical-layer building blocks (HFS section 3.2).
//!
//! Every block type implements [`Block`]: read and write ranges of *file
//! blocks* into caller buffers, truncate, persistent state, children. Per-device
//! blocks (`extent`) own device space; composite blocks (`stripe`, `regions`,
//! `replicate`, ...) only translate block numbers and forward to children, so
//! they stack in any order. A file's layout is a tree of blocks ([`Layout`]).
//!
//! Adding a type: write one file beside the others exporting a
//! `pub static TYPE: BlockType`, and list it in [`registry::TYPES`]. The type
//! owns the encoding of its state and of its journal records; the framework
//! checks every node's arguments and state version before the type sees them
//! and carries records as opaque bytes (docs/ARCHITECTURE.md, "Adding a block
//! type", walks through `example.rs`).

pub mod registry;

mod checksum;
pub mod colocate;
mod common;
mod compress;
#[cfg(test)]
mod example;
mod extent;
mod inline;
pub mod log;
mod parity;
mod regions;
mod replicate;
mod roundrobin;
mod stripe;
mod table;
#[cfg(test)]
mod testenv;
#[cfg(test)]
mod tests;
mod write_mostly;

pub use common::probing as probing_checksums;

use crate::codec::{Decoder, Encoder};
use crate::error::{Error, Result};
use crate::pool::Storage;
use std::collections::BTreeMap;
use std::sync::Arc;

pub use crate::base::BLOCK_SIZE;
pub use crate::journal::NodeRecord;
pub use checksum::block_sum;
pub use common::{chunks, each_device_of, scrub_by_read, span};
pub use compress::{stats as compress_stats, CompressStats};
pub use registry::{canonical, lookup, BlockType, ParamKind, ParamSpec, Registry, TYPES};
pub use replicate::live_changes;

/// A parameter value: a number (sizes in bytes) or a word.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    Num(u64),
    Word(String),
}

/// One node of a layout as written: type, parameters, children, device.
/// (The text form is parsed and printed by `layout`.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub kind: String,
    pub params: Vec<(String, Value)>,
    pub children: Vec<Spec>,
    pub device: Option<u32>,
}

/// A sink for requests whose records are not journalled (the meta-file's
/// own writes, whose tree the superblock records).
pub fn ignore_records(_: NodeRecord) {}

/// The file a request is for, as the types that place data by their
/// file's surroundings see it (`colocate`, C-FFS keyed co-location): the
/// directory it was created in or last reached through, and its owner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Origin {
    /// The directory's inode number (0: not known).
    pub dir: u64,
    pub uid: u32,
}

impl Origin {
    pub const NONE: Origin = Origin { dir: 0, uid: 0 };
}

/// What a request carries down a composition.
pub struct IoCtx<'a> {
    /// The inode the request is for (0: the meta-file, or no file): what
    /// per-device blocks that keep an index of their owners (`log`) record.
    pub owner: u64,
    /// Where that file belongs, for types that place data by it
    /// (`colocate`): [`Origin::NONE`] for requests of no file.
    pub origin: Origin,
    pub storage: &'a Storage,
    /// Journal batch the request belongs to: frees wait for it to commit.
    pub epoch: u64,
    /// Receives every persistent-state change the request makes, framed
    /// for the journal.
    pub sink: &'a (dyn Fn(NodeRecord) + Sync),
    /// The request may rewrite bad or missing copies it finds (self-heal):
    /// it holds the file's I/O lock and journals what `sink` receives.
    /// Reads that hold no lock or drop records (prefetch) leave repair to a
    /// later read or scrub.
    pub repair: bool,
}

impl IoCtx<'_> {
    /// Journals a change node `node` of type `kind` made to its state:
    /// `payload` is the type's own encoding of the change, which its
    /// [`Block::apply`] reads back at replay. The framework prefixes the
    /// type's record version.
    pub fn record(&self, kind: &BlockType, node: u32, payload: &[u8]) {
        let version = kind.state_version.unwrap_or(0);
        let mut bytes = Vec::with_capacity(1 + payload.len());
        bytes.push(version);
        bytes.extend_from_slice(payload);
        (self.sink)(NodeRecord { node, bytes })
    }
    /// Gives device blocks back once this request's batch has committed.
    pub fn free(&self, dev: u32, start: u64, len: u64) {
        if let Some(a) = self.storage.allocs.get(dev as usize) {
            a.free_deferred(self.epoch, start, len);
        }
    }
}

/// How much of a node's data survives the devices that are down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Health {
    /// Every copy or piece is in place.
    Ok,
    /// Readable, but with less redundancy than the layout asks for
    /// (a copy on a down device, ranges a copy missed, a parity piece gone).
    Degraded,
    /// Some data can no longer be read.
    Lost,
}

/// What one scrub (or resilver) pass asks of every node, and what it found.
pub struct Scrub<'a> {
    /// Rewrite what can be rebuilt from redundancy (false: only report).
    pub repair: bool,
    /// Devices whose contents are rebuilt wholesale (a replacement being
    /// resilvered): a redundant node treats every piece it keeps on them as
    /// lost and rewrites it from the others.
    pub rebuild: &'a (dyn Fn(u32) -> bool + Sync),
    /// A resilver, not a scrub: only the pieces on `rebuild` devices are
    /// written, from as few of the other pieces as that takes. Nodes with
    /// nothing on those devices are not read at all; what is read is
    /// verified as every read is, but pieces not needed are not visited.
    pub resilver_only: bool,
    pub tally: &'a ScrubTally,
    /// Memory the pass's steps hand on to the steps after them.
    pub leftovers: &'a Leftovers,
    /// A check of each block read, in the scrubbed node's block numbers,
    /// from a parent that can tell good data from bad (`checksum`) and
    /// hands it to a child that [`Block::verifies_copies`]: a copy whose
    /// block fails it is bad however many copies agree with it. Never
    /// passed further down ([`Scrub::with_tally`] drops it).
    pub verify: Option<Verify<'a>>,
}

impl<'a> Scrub<'a> {
    /// The same pass over a child, counting into `tally` (and without
    /// `verify`: a child's block numbers need not be this node's).
    pub fn with_tally<'b>(&self, tally: &'b ScrubTally) -> Scrub<'b>
    where
        'a: 'b,
    {
        Scrub {
            repair: self.repair,
            rebuild: self.rebuild,
            resilver_only: self.resilver_only,
            tally,
            leftovers: self.leftovers,
            verify: None,
        }
    }

    /// Whether this pass leaves `b` alone: a resilver, and no device under
    /// `b` is being rebuilt.
    pub fn skips<B: Block + ?Sized>(&self, b: &B) -> bool {
        fn touches(b: &dyn Block, rebuild: &dyn Fn(u32) -> bool) -> bool {
            b.device().is_some_and(rebuild) || b.children().iter().any(|c| touches(&**c, rebuild))
        }
        let rebuild = self.rebuild;
        self.resilver_only && !(b.device().is_some_and(rebuild) || b.children().iter().any(|c| touches(&**c, rebuild)))
    }
}

/// Memory the steps of one pass hand on to the steps after them (a type's
/// work buffers), so that each step does not allocate them afresh, as new
/// pages the kernel zeroes and maps again. A step takes what an earlier one
/// left and leaves it again when done; what is left is freed with the pass.
#[derive(Default)]
pub struct Leftovers(parking_lot::Mutex<Vec<Box<dyn std::any::Any + Send>>>);

impl Leftovers {
    /// Something of type `T` an earlier step left, if any.
    pub fn take<T: std::any::Any + Send>(&self) -> Option<T> {
        let mut v = self.0.lock();
        let i = v.iter().position(|b| b.is::<T>())?;
        v.swap_remove(i).downcast::<T>().ok().map(|b| *b)
    }

    /// Leaves `x` for a later step.
    pub fn leave<T: std::any::Any + Send>(&self, x: T) {
        self.0.lock().push(Box::new(x));
    }
}

/// Counts of a scrub pass, shared by the nodes it visits.
#[derive(Debug, Default)]
pub struct ScrubTally {
    /// File blocks read and verified (every copy counts).
    pub checked: std::sync::atomic::AtomicU64,
    /// Blocks rewritten from redundancy.
    pub repaired: std::sync::atomic::AtomicU64,
    /// File block ranges (start, length) of the node being scrubbed that no
    /// copy could supply.
    pub unrecoverable: parking_lot::Mutex<Vec<(u64, u64)>>,
}

impl ScrubTally {
    pub fn checked(&self, n: u64) {
        self.checked.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
    pub fn repaired(&self, n: u64) {
        self.repaired.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }
    pub fn lost(&self, fblk: u64, n: u64) {
        self.unrecoverable.lock().push((fblk, n));
    }
    /// Adds the counts of a pass over a child (`sub`) to these, and returns
    /// the ranges it could not supply, in the child's block numbers, for
    /// the caller to place in its own.
    pub fn absorb(&self, sub: ScrubTally) -> Vec<(u64, u64)> {
        self.checked(sub.checked.into_inner());
        self.repaired(sub.repaired.into_inner());
        sub.unrecoverable.into_inner()
    }
}

/// Typed access to a node's validated parameters (defaults already applied).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Params(pub BTreeMap<String, Value>);

impl Params {
    pub fn num(&self, key: &str) -> Result<u64> {
        match self.0.get(key) {
            Some(Value::Num(n)) => Ok(*n),
            Some(Value::Word(w)) => Err(Error::Layout(format!("parameter {key}={w}: expected a number"))),
            None => Err(Error::Layout(format!("missing parameter {key}"))),
        }
    }
    pub fn word(&self, key: &str) -> Result<&str> {
        match self.0.get(key) {
            Some(Value::Word(w)) => Ok(w),
            Some(Value::Num(n)) => Err(Error::Layout(format!("parameter {key}={n}: expected a word"))),
            None => Err(Error::Layout(format!("missing parameter {key}"))),
        }
    }
}

/// What a type's constructor receives.
pub struct BuildArgs<'a> {
    /// Preorder index of this node in its tree (the `node` of its records).
    pub id: u32,
    pub params: &'a Params,
    pub device: Option<u32>,
    pub children: Vec<Arc<dyn Block>>,
    /// Persistent state when decoding from disk, without its version byte
    /// (already checked against the type's); None for a new, empty node and
    /// always None for types without state.
    pub state: Option<&'a [u8]>,
}

/// One node of a file's persistent structure.
pub trait Block: Send + Sync {
    fn id(&self) -> u32;
    fn kind(&self) -> &'static BlockType;
    /// Every parameter with its value (defaults included).
    fn params(&self) -> Params;
    fn device(&self) -> Option<u32> {
        None
    }
    fn children(&self) -> &[Arc<dyn Block>] {
        &[]
    }
    /// Reads `buf.len() / BLOCK_SIZE` file blocks starting at `fblk`.
    /// Blocks never written read as zeros.
    fn read(&self, io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()>;
    /// Writes whole file blocks, allocating device space as needed.
    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()>;
    /// Drops every file block at or past `nblocks`.
    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()>;
    /// Writes `n` blocks of zeros from `fblk`, allocating device space as
    /// `write` would. Leaves that can have their device zero the space
    /// without sending the bytes override it, and composites that copy a
    /// write to several children pass it on; the default goes down through
    /// [`Block::map_range`] where the type offers it, and otherwise writes
    /// zeros through [`Block::write`].
    fn write_zeroes(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        let mut pieces = Vec::new();
        if self.map_range(fblk, n, &mut |_, c, cf, k| pieces.push((c, cf, k))) {
            return pieces.into_iter().try_for_each(|(c, cf, k)| {
                let child =
                    self.children().get(c).ok_or_else(|| Error::Layout(format!("map_range named child {c}")))?;
                child.write_zeroes(io, cf, k)
            });
        }
        common::write_zeroes_by_write(self, io, fblk, n)
    }
    /// This node's own persistent state (children encode theirs), without
    /// the version byte the framework adds. Only called for types with a
    /// `state_version`.
    fn encode_state(&self, _e: &mut Encoder) {}
    /// Applies a change this node recorded (`payload` as given to
    /// [`IoCtx::record`], its version already checked). The type decodes it
    /// strictly (trailing bytes, bad lengths and out-of-range values are
    /// corrupt) and applies it with the same code its live path used, so
    /// replay does exactly what was done. Only called for types with a
    /// `state_version`.
    fn apply(&self, _payload: &[u8]) -> Result<()> {
        Err(Error::corrupt("journal", format!("{} block keeps no state", self.kind().name)))
    }
    /// The node keeps the file's data in the meta-data record itself: a file
    /// that outgrows it moves to the pool's default layout.
    fn holds_data_in_metadata(&self) -> bool {
        self.kind().in_metadata
    }
    /// Device extents owned by this node itself: (device, start, len).
    fn extents(&self, _f: &mut dyn FnMut(u32, u64, u64)) {}
    /// The first file block at or after `fblk` that may hold data (SEEK_DATA).
    fn next_data(&self, fblk: u64) -> Option<u64>;
    /// Largest number of file blocks this node can hold.
    fn capacity(&self) -> u64 {
        u64::MAX
    }
    /// Whether an overwrite may land where the old data is (so a parent
    /// that wants copy-on-write, `checksum` and `compress`, punches the old
    /// blocks first). False for a node that never overwrites in place
    /// (`log`, `parity`): punching first would only lose the old data if
    /// the write then fails. A composite overwrites in place where any
    /// child does.
    fn overwrites_in_place(&self) -> bool {
        self.children().is_empty() || self.children().iter().any(|c| c.overwrites_in_place())
    }
    /// Drops file blocks [fblk, fblk+n), giving their device space back once
    /// the request's batch commits; they read as zeros afterwards. The
    /// default goes down through [`Block::map_range`] where the type offers
    /// it (each piece punched in its child), and otherwise is not supported.
    fn punch(&self, io: &IoCtx, fblk: u64, n: u64) -> Result<()> {
        let mut pieces = Vec::new();
        if self.map_range(fblk, n, &mut |_, c, cf, k| pieces.push((c, cf, k))) {
            return pieces.into_iter().try_for_each(|(c, cf, k)| {
                let child =
                    self.children().get(c).ok_or_else(|| Error::Layout(format!("map_range named child {c}")))?;
                child.punch(io, cf, k)
            });
        }
        Err(Error::NotSupported(format!("{} block: punching holes", self.kind().name)))
    }
    /// Whether [`Block::shift`] can move this node's mappings at or past
    /// file block `from` by `delta` blocks (a collapsed or inserted range:
    /// `fallocate` COLLAPSE_RANGE and INSERT_RANGE). Types that cannot
    /// (their placement depends on the offset, or they keep state by block
    /// they would have to rewrite) say no, and the request is refused
    /// before anything changes.
    fn can_shift(&self, _from: u64, _delta: i64) -> bool {
        false
    }
    /// Moves every mapping at or past file block `from` by `delta` blocks:
    /// down for a collapse (the `-delta` blocks below `from` are dropped
    /// first, their space freed once the request's batch commits), up for
    /// an insert (the gap reads as a hole). Called only where
    /// [`Block::can_shift`] said yes, under the file's I/O lock held
    /// exclusively.
    fn shift(&self, _io: &IoCtx, _from: u64, _delta: i64) -> Result<()> {
        Err(Error::NotSupported(format!("{} block: collapsing or inserting ranges", self.kind().name)))
    }
    /// For a per-device node: moves file blocks [fblk, fblk+n), if they
    /// still live at device blocks [pblk, pblk+n) of this node's device, to
    /// fresh space, recording the change as a write would; returns how many
    /// blocks moved (0: they live elsewhere now, or the type does not move
    /// its blocks). The fresh space is where the type places a write now
    /// (`log`: its head; `colocate`: its key's group). The tool of the log
    /// cleaner and of `Fs::regroup`; called under the file's I/O lock held
    /// exclusively.
    fn relocate(&self, _io: &IoCtx, _fblk: u64, _pblk: u64, _n: u64) -> Result<u64> {
        Ok(0)
    }
    /// For a per-device node that keeps some of its blocks together
    /// (`colocate`: the blocks of its first group, in one run in one aligned
    /// group): those blocks as (file block, device block, length) runs when
    /// they are not together (scattered over more than one group after the
    /// file grew in steps, or moved to another directory and grew there),
    /// for [`Block::relocate`] to move, in order, into place; empty when
    /// they are together, and for every other type. `Fs::regroup` and fsck
    /// ask it; nothing on the data path does.
    fn scattered(&self) -> Vec<(u64, u64, u64)> {
        Vec::new()
    }
    /// For a per-device node that keeps a device-wide index of its blocks
    /// (`log`): enters every block it maps, as owned by `io.owner` (the
    /// index is rebuilt this way after open). Others keep none.
    fn register(&self, _io: &IoCtx) {}
    /// What survives when the devices for which `down` is true are gone.
    /// The default suits every type without redundancy: a leaf is lost with
    /// its device, a composite is as bad as its worst child.
    fn health(&self, down: &dyn Fn(u32) -> bool) -> Health {
        let own = match self.device() {
            Some(d) if down(d) => Health::Lost,
            _ => Health::Ok,
        };
        self.children().iter().map(|c| c.health(down)).fold(own, Health::max)
    }
    /// The block of this node that child `child` keeps at its block
    /// `cblk`, for a node that keeps each of its blocks at one block of a
    /// child (a copy of it at the same block of each child counts). None
    /// where a child block holds no one block of this node (parity, a
    /// compressed run) or none at all. Roll-forward uses it to find the
    /// file block a leaf's summary speaks of.
    fn parent_block(&self, _child: usize, _cblk: u64) -> Option<u64> {
        None
    }
    /// For a composite that places each file block on exactly one child:
    /// calls `f(file_fblk, child, child_fblk, n)` for the pieces of
    /// [fblk, fblk+n) and returns true. Types that do not translate this way
    /// return false.
    fn map_range(&self, _fblk: u64, _n: u64, _f: &mut dyn FnMut(u64, usize, u64, u64)) -> bool {
        false
    }
    /// Reads every copy of file blocks [fblk, fblk+n), verifies them, and
    /// (with `s.repair`) rewrites bad or missing copies from good ones,
    /// counting into `s.tally`. Redundant types override this; the default
    /// goes down through [`Block::map_range`] where the type offers it, and
    /// otherwise reads the range through [`Block::read`] and reports what
    /// fails as unrecoverable.
    fn scrub(&self, io: &IoCtx, s: &Scrub, fblk: u64, n: u64) -> Result<()> {
        common::scrub_default(self, io, s, fblk, n)
    }
    /// Whether this node picks among copies of a block by a check its
    /// parent hands it ([`Block::read_verified`], [`Scrub::verify`]):
    /// `replicate`, whose copies a `checksum` above can tell apart where
    /// the copies themselves cannot. Others read as `read` does.
    fn verifies_copies(&self) -> bool {
        false
    }
    /// Reads like [`Block::read`], keeping only blocks `verify` accepts: a
    /// node that [`Block::verifies_copies`] serves a block that fails it
    /// from another copy, counts it on the failing copy's devices, and
    /// (with `io.repair`) rewrites that copy from the good one; where no
    /// copy passes, it fails. The default reads, and the caller verifies.
    fn read_verified(&self, io: &IoCtx, fblk: u64, buf: &mut [u8], _verify: Verify<'_>) -> Result<()> {
        self.read(io, fblk, buf)
    }
}

/// A check of one block read for file block `fblk` (the node's own block
/// numbers): `Some(true)` if `data` is what was written there, `Some(false)`
/// if it is not, `None` where there is nothing to check it against (a block
/// the checker holds no checksum for). `checksum` hands one to a child that
/// [`Block::verifies_copies`].
pub type Verify<'a> = &'a (dyn Fn(u64, &[u8]) -> Option<bool> + Sync);

/// A file's layout: its tree of building blocks, with every node indexed by
/// its preorder id so replayed changes go straight to their node.
#[derive(Clone)]
pub struct Layout {
    root: Arc<dyn Block>,
    nodes: Vec<Arc<dyn Block>>,
}

/// Bounds every composition is checked against (HFS 2.2: compositions may be
/// untrusted, so they are validated before use).
pub const MAX_DEPTH: usize = 16;
pub const MAX_NODES: usize = 1024;

/// First bytes of an encoded layout tree in the varint encoding. Read as the
/// fixed-width encoding's u32 node count they would be at least 0xC100, far
/// past [`MAX_NODES`], so the two encodings cannot be mistaken.
const COMPACT_MARK: [u8; 2] = [0x00, 0xC1];

/// How an encoded tree's numbers, counts and strings are read: the varint
/// encoding this build writes, or the fixed-width one of format 4.
#[derive(Clone, Copy)]
struct Wire {
    compact: bool,
}

impl Wire {
    /// Smallest encoded node and parameter, (varint, fixed-width): a count
    /// the rest of the input could not hold is refused before allocating.
    const NODE: (usize, usize) = (5, 16);
    const PARAM: (usize, usize) = (3, 6);

    fn count(self, d: &mut Decoder, min: (usize, usize)) -> Result<usize> {
        if self.compact {
            d.var_count(min.0)
        } else {
            d.count(min.1)
        }
    }
    fn num(self, d: &mut Decoder) -> Result<u64> {
        if self.compact {
            d.var()
        } else {
            d.u64()
        }
    }
    fn bytes<'a>(self, d: &mut Decoder<'a>) -> Result<&'a [u8]> {
        if self.compact {
            d.var_bytes()
        } else {
            d.bytes()
        }
    }
    fn str<'a>(self, d: &mut Decoder<'a>) -> Result<&'a str> {
        if self.compact {
            d.var_str()
        } else {
            d.str()
        }
    }
    /// Varint: device + 1, 0 for none; fixed-width: u32, `u32::MAX` for none.
    fn device(self, d: &mut Decoder) -> Result<Option<u32>> {
        Ok(if self.compact { d.var32()?.checked_sub(1) } else { Some(d.u32()?).filter(|&v| v != u32::MAX) })
    }
}
pub const MAX_FANOUT: usize = 256;

impl Layout {
    /// Builds an empty tree from a resolved, validated spec.
    pub fn build(spec: &Spec) -> Result<Layout> {
        Self::build_in(&Registry::BUILTIN, spec)
    }

    /// [`Layout::build`] with the types of `reg`.
    pub fn build_in(reg: &Registry, spec: &Spec) -> Result<Layout> {
        let mut next = 0u32;
        let root = build_node(reg, spec, &mut next, 0)?;
        Ok(Self::index(root))
    }

    fn index(root: Arc<dyn Block>) -> Layout {
        fn walk(b: &Arc<dyn Block>, out: &mut Vec<Arc<dyn Block>>) {
            out.push(b.clone());
            for c in b.children() {
                walk(c, out);
            }
        }
        let mut nodes = Vec::new();
        walk(&root, &mut nodes);
        Layout { root, nodes }
    }

    pub fn root(&self) -> &Arc<dyn Block> {
        &self.root
    }

    pub fn nodes(&self) -> &[Arc<dyn Block>] {
        &self.nodes
    }

    /// The canonical spec of this tree (structure and parameters, no state).
    pub fn spec(&self) -> Spec {
        fn walk(b: &Arc<dyn Block>) -> Spec {
            let mut params: Vec<(String, Value)> = b.params().0.into_iter().collect();
            params.retain(|(k, _)| k != "width");
            Spec {
                kind: b.kind().name.to_string(),
                params,
                children: b.children().iter().map(walk).collect(),
                device: b.device(),
            }
        }
        canonical(walk(&self.root))
    }

    /// Applies a journalled record to its node: the one way a node's state
    /// changes at replay, and the code the node's live path runs too.
    pub fn apply(&self, r: &NodeRecord) -> Result<()> {
        let n = self.nodes.get(r.node as usize).ok_or_else(|| {
            Error::corrupt("journal", format!("record for node {} of a {}-node layout", r.node, self.nodes.len()))
        })?;
        let t = n.kind();
        let want = t.state_version.ok_or_else(|| {
            Error::corrupt("journal", format!("record for {} node {}, a type that keeps no state", t.name, r.node))
        })?;
        match r.bytes.split_first() {
            Some((&v, payload)) if v == want => n.apply(payload),
            Some((&v, _)) => Err(Error::corrupt(
                "journal",
                format!("{} node {}: record version {v}, this build reads version {want}", t.name, r.node),
            )),
            None => Err(Error::corrupt("journal", format!("{} node {}: empty record", t.name, r.node))),
        }
    }

    /// The most device failures the tree's data survives whichever devices
    /// fail (up to `cap`), asked of the nodes themselves
    /// ([`Block::health`]): the least number of its devices whose loss
    /// loses data, less one. A tree on no device (data in the meta-data)
    /// survives what the meta-data does: `cap`.
    pub fn failures_survived(&self, cap: u32) -> u32 {
        let mut devs: Vec<u32> = self.nodes.iter().filter_map(|n| n.device()).collect();
        devs.sort_unstable();
        devs.dedup();
        if devs.is_empty() {
            return cap;
        }
        let cap = cap.min(devs.len() as u32);
        // Every set of k devices, k = 1, 2, ...: the first k at which some
        // set loses data is one past what the tree survives. Sets are
        // walked as index combinations; layouts span few devices, and a
        // wide one with no redundancy fails at k = 1.
        for k in 1..=cap as usize {
            let mut idx: Vec<usize> = (0..k).collect();
            loop {
                let down = |d: u32| idx.iter().any(|&i| devs[i] == d);
                if self.root.health(&down) == Health::Lost {
                    return k as u32 - 1;
                }
                // Next combination.
                let mut i = k;
                while i > 0 && idx[i - 1] == devs.len() - k + i - 1 {
                    i -= 1;
                }
                if i == 0 {
                    break;
                }
                idx[i - 1] += 1;
                for j in i..k {
                    idx[j] = idx[j - 1] + 1;
                }
            }
        }
        cap
    }

    /// Every device extent the file owns.
    pub fn extents(&self, f: &mut dyn FnMut(u32, u64, u64)) {
        for n in &self.nodes {
            n.extents(f);
        }
    }

    /// Preorder: kind, params, device, child count, state; every number
    /// and length a LEB128 varint, after the two-byte mark that tells this
    /// encoding from the fixed-width one of earlier builds (docs/FORMAT.md,
    /// "Layout trees").
    pub fn encode(&self, e: &mut Encoder) {
        e.raw(&COMPACT_MARK);
        e.var(self.nodes.len() as u64);
        for n in &self.nodes {
            e.var_str(n.kind().name);
            let p = n.params();
            e.var(p.0.len() as u64);
            for (k, v) in &p.0 {
                e.var_str(k);
                match v {
                    Value::Num(x) => e.u8(0).var(*x),
                    Value::Word(w) => e.u8(1).var_str(w),
                };
            }
            e.var(n.device().map_or(0, |d| u64::from(d) + 1));
            e.var(n.children().len() as u64);
            let mut st = Encoder::new();
            if let Some(v) = n.kind().state_version {
                st.u8(v);
                n.encode_state(&mut st);
            }
            e.var_bytes(&st.buf);
        }
    }

    pub fn decode(d: &mut Decoder) -> Result<Layout> {
        Self::decode_in(&Registry::BUILTIN, d)
    }

    /// The type of an encoded tree's root, read without building the tree
    /// (either encoding). Only the root's name is checked here.
    pub fn root_type(encoded: &[u8]) -> Result<&'static BlockType> {
        let mut d = Decoder::new(encoded, "layout tree");
        let w = Wire { compact: d.starts_with(&COMPACT_MARK) };
        if w.compact {
            d.take(COMPACT_MARK.len())?;
        }
        w.count(&mut d, Wire::NODE)?;
        let name = w.str(&mut d)?;
        Registry::BUILTIN.lookup(name).ok_or_else(|| d.err(format!("unknown block type {name:?}")))
    }

    /// [`Layout::decode`] with the types of `reg`.
    pub fn decode_in(reg: &Registry, d: &mut Decoder) -> Result<Layout> {
        struct Raw<'a> {
            kind: &'static BlockType,
            params: Params,
            device: Option<u32>,
            nchildren: usize,
            state: &'a [u8],
        }
        let w = Wire { compact: d.starts_with(&COMPACT_MARK) };
        if w.compact {
            d.take(COMPACT_MARK.len())?;
        }
        let count = w.count(d, Wire::NODE)?;
        if count == 0 || count > MAX_NODES {
            return Err(d.err(format!("layout with {count} nodes")));
        }
        let mut raws = Vec::with_capacity(count);
        for _ in 0..count {
            let name = w.str(d)?;
            let kind = reg.lookup(name).ok_or_else(|| d.err(format!("unknown block type {name:?}")))?;
            let np = w.count(d, Wire::PARAM)?;
            let mut params = Params::default();
            for _ in 0..np {
                let k = w.str(d)?.to_string();
                let v = match d.u8()? {
                    0 => Value::Num(w.num(d)?),
                    1 => Value::Word(w.str(d)?.to_string()),
                    t => return Err(d.err(format!("bad parameter tag {t}"))),
                };
                if params.0.insert(k, v).is_some() {
                    return Err(d.err("a parameter given twice"));
                }
            }
            let device = w.device(d)?;
            let nchildren = w.count(d, Wire::NODE)?;
            let state = w.bytes(d)?;
            raws.push(Raw { kind, params, device, nchildren, state });
        }
        return build_tree(raws);

        // Rebuild bottom-up from the preorder list.
        fn build_tree(raws: Vec<Raw>) -> Result<Layout> {
            let mut pos = 0;
            let root = take(&raws, &mut pos, 0)?;
            if pos != raws.len() {
                return Err(Error::corrupt(
                    "layout",
                    format!("{} nodes not reachable from the root", raws.len() - pos),
                ));
            }
            Ok(Layout::index(root))
        }
        fn take(raws: &[Raw], pos: &mut usize, depth: usize) -> Result<Arc<dyn Block>> {
            if depth > MAX_DEPTH {
                return Err(Error::corrupt("layout", "tree deeper than the limit"));
            }
            let id = *pos;
            let r = raws.get(id).ok_or_else(|| Error::corrupt("layout", "children past the end of the node list"))?;
            *pos += 1;
            let mut children = Vec::with_capacity(r.nchildren.min(MAX_FANOUT));
            for _ in 0..r.nchildren {
                children.push(take(raws, pos, depth + 1)?);
            }
            decode_node(r.kind, id as u32, &r.params, r.device, children, r.state)
        }
    }
}

fn build_node(reg: &Registry, spec: &Spec, next: &mut u32, depth: usize) -> Result<Arc<dyn Block>> {
    if depth > MAX_DEPTH {
        return Err(Error::Layout(format!("deeper than {MAX_DEPTH} levels")));
    }
    let kind = reg.lookup(&spec.kind).ok_or_else(|| Error::Layout(format!("unknown block type {:?}", spec.kind)))?;
    let id = *next;
    *next += 1;
    if *next as usize > MAX_NODES {
        return Err(Error::Layout(format!("more than {MAX_NODES} blocks in one layout")));
    }
    let params = registry::params_with_defaults(kind, &spec.params)?;
    let mut children = Vec::with_capacity(spec.children.len());
    for c in &spec.children {
        children.push(build_node(reg, c, next, depth + 1)?);
    }
    construct(kind, BuildArgs { id, params: &params, device: spec.device, children, state: None })
}

/// Makes a node decoded from disk: its state framing is checked and its
/// version byte stripped, then it is built like any other node.
fn decode_node(
    kind: &'static BlockType,
    id: u32,
    params: &Params,
    device: Option<u32>,
    children: Vec<Arc<dyn Block>>,
    state: &[u8],
) -> Result<Arc<dyn Block>> {
    let state = common::check_state(kind, id, state)?;
    construct(kind, BuildArgs { id, params, device, children, state })
}

/// Every node, built or decoded, comes through here: the framework checks
/// its arguments against the registry entry before the type's constructor
/// sees them (decoded layouts bypass the parser, so this is the last line).
fn construct(kind: &'static BlockType, a: BuildArgs) -> Result<Arc<dyn Block>> {
    common::check_args(kind, &a)?;
    (kind.build)(a)
}
