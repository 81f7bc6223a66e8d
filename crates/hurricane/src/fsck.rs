//! The consistency checker behind `hurricane fsck`.
//!
//! [`check`] walks the whole meta-data of an open pool and reports what is
//! inconsistent: directory entries naming missing inodes or the wrong file
//! type, link counts, directories' ".." pointers, inodes unreachable from the
//! root, device extents claimed twice or lying outside their device, the
//! allocators' free maps against the extents the tree claims, file sizes and
//! symlink targets. With `repair` it also fixes what can be fixed without
//! guessing at data: it removes bad entries, reconnects orphans under
//! `/lost+found`, sets link counts and parent pointers, then writes a
//! checkpoint so the repairs are durable, and checks again.
//!
//! Files whose nodes keep blocks apart that they would place together
//! (`colocate` files whose small-file blocks are scattered over more than
//! one group) are counted in a note: co-location lost is not corruption.
//! `repair` regroups them ([`Fs::regroup`]), each into the group of the
//! directory it was found in.
//!
//! The check first reads every block of the meta-file from each of its
//! copies and verifies it against the file's checksum pages: a block no
//! copy holds intact is damage no repair undoes, and a block one copy got
//! wrong is repaired by copying the file whole from the good blocks. What
//! the walk of the inodes and directories cannot read (the inode table's
//! listing, an inode, a directory's entries) makes the check incomplete:
//! it is reported as such, the findings that rest on the absence of
//! something (unreachable inodes, link counts, parents, space owned by
//! nothing) are not made from it, `repair` writes nothing unless forced,
//! and space is never freed while the meta-data is incomplete. The pool
//! is consistent only when every meta-data block has a verified copy, the
//! walk read everything, and nothing was found.
//!
//! Repairs that have a journal op use it (`Link`, `SetSize`, `SetDirLayout`);
//! the others (link counts, entries naming missing inodes) change the
//! in-memory state under the inode locks and become durable with the
//! checkpoint that ends the repair. The pool should be opened without the
//! background committer (`Options::background_commit = false`), so that no
//! journal record can hold a partial repair.

use crate::blocks::{Layout, BLOCK_SIZE};
use crate::codec::Decoder;
use crate::error::{Error, Result};
use crate::fs::Fs;
use crate::journal::{Ino, Op};
use crate::layout;
use crate::namespace::inode::{S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use crate::namespace::store::CopyCheck;
use crate::namespace::{Body, Creds, ROOT};
use crate::pool::{Superblock, RESERVED_BLOCKS};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt;

const BS: u64 = BLOCK_SIZE as u64;
/// Largest file size the engine writes (`fs::io::MAX_FILE_SIZE`).
const MAX_FILE_SIZE: u64 = 1 << 50;
/// Where reconnected orphans go.
pub const LOST_FOUND: &str = "lost+found";

/// What a check found and did.
#[derive(Debug, Clone, Default)]
pub struct FsckReport {
    /// Inconsistencies found by the first pass.
    pub problems: Vec<String>,
    /// Repairs made (with `repair`).
    pub repaired: Vec<String>,
    /// Inconsistencies still there at the end (after repairs, if any).
    pub remaining: Vec<String>,
    /// Things worth knowing that are not inconsistencies.
    pub notes: Vec<String>,
    /// Meta-data the check could not read (the inode table's listing,
    /// inodes, directories' entries): the check is incomplete, and the
    /// pool is not called consistent.
    pub incomplete: Vec<String>,
    /// Meta-file blocks within its length (0 when the pool keeps no
    /// meta-file checksums, so none were verified).
    pub meta_blocks: u64,
    /// Meta-file block reads verified, every copy counted.
    pub meta_checked: u64,
    /// Meta-file blocks a copy got wrong while another copy holds them.
    pub meta_damaged: u64,
    /// Meta-file blocks no copy holds intact that the committed state
    /// uses (checksum pages at `2^36 + page`).
    pub meta_lost: Vec<u64>,
    /// Meta-file blocks no copy holds intact that nothing the store
    /// reaches uses (what a crash leaves of a checkpoint that never
    /// committed: later checkpoints write over them).
    pub meta_unused: Vec<u64>,
    /// Device blocks the first pass found allocated but owned by nothing:
    /// what `repair` returns to the free maps.
    pub would_free: u64,
    pub inodes: u64,
    pub dirs: u64,
    pub files: u64,
    pub symlinks: u64,
    pub specials: u64,
    /// Sum of regular file sizes.
    pub bytes: u64,
    /// Device blocks owned by files.
    pub file_blocks: u64,
    /// Device blocks in use in the whole pool (files, meta-file, journal).
    pub used_blocks: u64,
    pub total_blocks: u64,
    /// Files whose small-file blocks were scattered over more than one
    /// group (`colocate`; a note, not a problem).
    pub scattered: u64,
    /// Of those, files `repair` regrouped.
    pub regrouped: u64,
}

impl FsckReport {
    /// True when the pool is consistent now: nothing found, and every
    /// meta-data block read and verified.
    pub fn is_clean(&self) -> bool {
        self.remaining.is_empty() && self.is_complete()
    }

    /// True when the check read all the meta-data it needs.
    pub fn is_complete(&self) -> bool {
        self.incomplete.is_empty() && self.meta_lost.is_empty()
    }
}

/// How [`check_with`] runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct FsckOptions {
    /// Fix what can be fixed without guessing at data.
    pub repair: bool,
    /// Repair even when the meta-data could not all be read (space is
    /// still never freed then).
    pub force: bool,
}

/// Progress of a check: (phase, done, total), called every few thousand items.
pub type Progress<'a> = &'a mut dyn FnMut(&str, u64, u64);

/// One inconsistency, with what a repair needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Finding {
    /// `dir` has an entry `name` for an inode that does not exist.
    Dangling {
        dir: Ino,
        name: Vec<u8>,
        target: Ino,
    },
    /// An entry's recorded file type differs from its inode's.
    KindMismatch {
        dir: Ino,
        name: Vec<u8>,
        ino: Ino,
        recorded: u32,
        actual: u32,
    },
    /// A directory named by more than one entry: this entry is extra.
    ExtraDirLink {
        dir: Ino,
        name: Vec<u8>,
        ino: Ino,
    },
    /// A directory's ".." does not name the directory holding its entry.
    WrongParent {
        ino: Ino,
        recorded: Ino,
        actual: Ino,
    },
    /// Linked inode unreachable from the root (top of its unreachable tree).
    Orphan {
        ino: Ino,
        kind: u32,
        beneath: usize,
    },
    Nlink {
        ino: Ino,
        has: u32,
        want: u32,
    },
    RootNotOwnParent {
        recorded: Ino,
    },
    BadExtent {
        owner: String,
        dev: u32,
        start: u64,
        len: u64,
        why: String,
    },
    DoubleClaim {
        dev: u32,
        start: u64,
        len: u64,
        a: String,
        b: String,
    },
    /// Blocks the allocator holds as used that nothing claims.
    Leak {
        dev: u32,
        start: u64,
        len: u64,
    },
    /// Blocks a file or the meta-data owns that the allocator holds as free.
    ClaimedFree {
        dev: u32,
        start: u64,
        len: u64,
    },
    Size {
        ino: Ino,
        size: u64,
        max: u64,
    },
    SymlinkEmpty {
        ino: Ino,
    },
    SymlinkSize {
        ino: Ino,
        size: u64,
        len: u64,
    },
    BadDirLayout {
        ino: Ino,
        spec: String,
        err: String,
    },
    Superblock {
        err: String,
    },
}

impl Finding {
    /// Whether `--repair` can fix it without guessing at data.
    fn repairable(&self) -> bool {
        !matches!(
            self,
            Finding::BadExtent { .. }
                | Finding::DoubleClaim { .. }
                | Finding::SymlinkEmpty { .. }
                | Finding::Superblock { .. }
        )
    }
}

fn kind_name(k: u32) -> &'static str {
    match k & S_IFMT {
        S_IFREG => "file",
        S_IFDIR => "directory",
        S_IFLNK => "symlink",
        _ => "special file",
    }
}

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// Finding plus a way to name inodes by path.
struct Shown<'a>(&'a Finding, &'a Scan);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.1;
        match self.0 {
            Finding::Dangling { dir, name, target } => {
                write!(f, "{}: entry names inode {target}, which does not exist", s.child_path(*dir, name))
            }
            Finding::KindMismatch { dir, name, ino, recorded, actual } => write!(
                f,
                "{}: entry says {} but inode {ino} is a {}",
                s.child_path(*dir, name),
                kind_name(*recorded),
                kind_name(*actual)
            ),
            Finding::ExtraDirLink { dir, name, ino } => {
                write!(
                    f,
                    "{}: extra link to directory inode {ino} (already at {})",
                    s.child_path(*dir, name),
                    s.path(*ino)
                )
            }
            Finding::WrongParent { ino, recorded, actual } => {
                write!(f, "{}: \"..\" names inode {recorded}, but its entry is in inode {actual}", s.path(*ino))
            }
            Finding::Orphan { ino, kind, beneath } => {
                write!(f, "inode {ino} ({}) is not reachable from the root", kind_name(*kind))?;
                if *beneath > 0 {
                    write!(f, ", with {beneath} inodes beneath it")?;
                }
                Ok(())
            }
            Finding::Nlink { ino, has, want } => write!(f, "{}: link count is {has}, should be {want}", s.path(*ino)),
            Finding::RootNotOwnParent { recorded } => write!(f, "/: \"..\" names inode {recorded}, should be itself"),
            Finding::BadExtent { owner, dev, start, len, why } => {
                write!(f, "{owner}: extent device {dev} blocks {start}..{} {why}", start + len)
            }
            Finding::DoubleClaim { dev, start, len, a, b } => {
                write!(f, "device {dev} blocks {start}..{} are claimed by both {a} and {b}", start + len)
            }
            Finding::Leak { dev, start, len } => {
                write!(f, "device {dev} blocks {start}..{} are allocated but owned by nothing", start + len)
            }
            Finding::ClaimedFree { dev, start, len } => {
                write!(f, "device {dev} blocks {start}..{} are in use but the allocator holds them free", start + len)
            }
            Finding::Size { ino, size, max } => {
                write!(f, "{}: size {size} exceeds what its layout can hold ({max} bytes)", s.path(*ino))
            }
            Finding::SymlinkEmpty { ino } => write!(f, "{}: symlink with an empty target", s.path(*ino)),
            Finding::SymlinkSize { ino, size, len } => {
                write!(f, "{}: symlink size is {size}, its target has {len} bytes", s.path(*ino))
            }
            Finding::BadDirLayout { ino, spec, err } => {
                write!(f, "{}: default layout {spec:?} is not valid for this pool: {err}", s.path(*ino))
            }
            Finding::Superblock { err } => write!(f, "superblock: {err}"),
        }
    }
}

/// What the scan copies out of one inode.
struct Node {
    kind: u32,
    nlink: u32,
    size: u64,
    parent: Ino,
    entries: Vec<(Vec<u8>, Ino, u32)>,
    dir_layout: String,
    symlink_len: Option<u64>,
    extents: Vec<(u32, u64, u64)>,
    capacity: u64,
    /// Some node keeps blocks apart that it would place together.
    scattered: bool,
}

/// One pass over the meta-data: the inode snapshot and what is wrong.
struct Scan {
    nodes: BTreeMap<Ino, Node>,
    /// Where a reachable inode was first found: (directory, name).
    names: HashMap<Ino, (Ino, Vec<u8>)>,
    findings: Vec<Finding>,
    file_blocks: u64,
    used_blocks: u64,
    total_blocks: u64,
    /// What could not be read: the inode concerned (if one is) and why.
    unread: Vec<(Option<Ino>, String)>,
    /// Inodes whose records could not be read (entries naming them are
    /// not dangling: their targets may well exist).
    unreadable: BTreeSet<Ino>,
    /// Device blocks allocated and owned by nothing that could be read,
    /// left alone because the meta-data is incomplete.
    unowned: u64,
}

impl Scan {
    fn path(&self, ino: Ino) -> String {
        if ino == ROOT {
            return "/".into();
        }
        let mut parts = Vec::new();
        let mut cur = ino;
        while cur != ROOT {
            match self.names.get(&cur) {
                Some((d, n)) if parts.len() < 256 => {
                    parts.push(show(n));
                    cur = *d;
                }
                _ => return format!("inode {ino}"),
            }
        }
        parts.reverse();
        format!("/{}", parts.join("/"))
    }

    fn child_path(&self, dir: Ino, name: &[u8]) -> String {
        let p = self.path(dir);
        if p.starts_with('/') {
            format!("{}/{}", p.trim_end_matches('/'), show(name))
        } else {
            format!("{p}/{}", show(name))
        }
    }

    fn shown(&self) -> Vec<String> {
        self.findings.iter().map(|f| Shown(f, self).to_string()).collect()
    }

    fn shown_unread(&self) -> Vec<String> {
        self.unread
            .iter()
            .map(|(ino, why)| match ino {
                Some(i) => format!("{}: {why}", self.path(*i)),
                None => why.clone(),
            })
            .collect()
    }

    fn complete(&self) -> bool {
        self.unread.is_empty()
    }
}

/// What the meta-file block check found, as problems.
fn meta_problems(c: &CopyCheck) -> Vec<String> {
    let mut v = Vec::new();
    if !c.lost.is_empty() {
        let mut shown: Vec<String> = c.lost.iter().take(8).map(|b| b.to_string()).collect();
        if c.lost.len() > 8 {
            shown.push(format!("and {} more", c.lost.len() - 8));
        }
        v.push(format!(
            "meta-file: {} blocks have no copy that agrees with its checksum (blocks {}): the meta-data store is damaged; `hurricane recover` copies out what can still be read",
            c.lost.len(),
            shown.join(", ")
        ));
    }
    v
}

/// Blocks a copy got wrong while another holds them: redundancy lost,
/// nothing else (a note; `repair` writes them again).
fn meta_note(c: &CopyCheck) -> Option<String> {
    (c.damaged > 0).then(|| {
        format!(
            "meta-file: {} blocks were wrong on a copy (another copy holds them intact; --repair writes them again)",
            c.damaged
        )
    })
}

/// Checks the pool; with `repair`, fixes what it can and checks again
/// (unless the meta-data could not all be read: see [`check_with`]).
pub fn check(fs: &Fs, repair: bool, progress: Progress) -> Result<FsckReport> {
    check_with(fs, FsckOptions { repair, force: false }, progress)
}

/// Reads every record of the committed store through a store opened
/// afresh over the meta-file, read-only.
fn read_committed(fs: &Fs) -> Result<u64> {
    use crate::namespace::store::{MetaFile, MetaStore};
    let (tree, len) = fs.state().store().file().describe();
    let layout = Layout::decode(&mut Decoder::new(&tree, "meta-file layout"))?;
    let file = MetaFile::new(fs.inner.storage.clone(), layout, len, true);
    MetaStore::open(file, 16 << 20, 0, 1)?.read_all()
}

/// Every meta-file block from each copy ([`Fs::check_meta_copies`]).
fn check_meta(fs: &Fs, progress: Progress) -> Result<Option<CopyCheck>> {
    fs.check_meta_copies(&mut |done, total| progress("meta-data blocks", done, total))
}

/// Checks the pool; with `opts.repair`, fixes what it can and checks
/// again. When the meta-data could not all be read (a meta-file block no
/// copy holds, an inode or directory that fails to read) nothing is
/// repaired unless `opts.force`, and space is never freed.
pub fn check_with(fs: &Fs, opts: FsckOptions, progress: Progress) -> Result<FsckReport> {
    let repair = opts.repair;
    let mut rep = FsckReport::default();
    let open = fs.report();
    if !open.was_clean {
        rep.notes.push(format!(
            "the pool was not closed cleanly: replayed {} journal records ({} ops)",
            open.replayed_records, open.replayed_ops
        ));
    }
    if open.orphans_freed > 0 {
        rep.notes.push(format!("freed {} unlinked inodes that were still open at the last close", open.orphans_freed));
    }
    if open.dropped_records > 0 {
        rep.notes.push("dropped the journal's last record: its data never all reached the disk".to_string());
    }
    let rolled = open.rolled_forward;
    if rolled.found > 0 && fs.is_read_only() {
        rep.notes.push(format!(
            "{} log writes made after the last commit reached the disk: a writable open rolls them forward",
            rolled.found
        ));
    } else if rolled.found > 0 {
        rep.notes.push(format!(
            "rolled forward {} of {} log writes made after the last commit ({} blocks)",
            rolled.applied, rolled.found, rolled.blocks
        ));
    }
    if !open.journal_repaired.is_empty() {
        rep.notes.push(format!(
            "journal copies on devices {:?} lacked records another copy held (torn, damaged, or away when they \
             were written); replay took each record from a copy that held it{}",
            open.journal_repaired,
            if fs.is_read_only() { "" } else { ", and they were rewritten" }
        ));
    }
    if !open.journal_unreadable.is_empty() {
        rep.notes.push(format!("journal copies on devices {:?} could not be read", open.journal_unreadable));
    }
    // Frees wait for their journal batch: commit them so the free maps are final.
    fs.sync()?;
    let mut meta = check_meta(fs, progress)?;
    match &meta {
        Some(c) => {
            rep.meta_blocks = fs.state().store().file().blocks();
            rep.meta_checked = c.checked;
            rep.meta_damaged = c.damaged;
            rep.meta_lost = c.lost.clone();
            // Blocks no copy holds may be ones nothing uses: every record
            // of every table read through a store opened afresh (no page
            // cache to hide them) says whether the committed state needs
            // any of them.
            if !c.lost.is_empty() {
                match read_committed(fs) {
                    Ok(records) => {
                        rep.notes.push(format!(
                            "meta-file: {} blocks no copy holds intact are used by none of the store's {records} records (a checkpoint a crash cut short left them; later checkpoints write over them)",
                            c.lost.len()
                        ));
                        rep.meta_unused = std::mem::take(&mut rep.meta_lost);
                        if let Some(m) = meta.as_mut() {
                            m.lost.clear();
                        }
                    }
                    Err(e) => tracing::error!("fsck: the store's records could not all be read: {e}"),
                }
            }
        }
        None => rep.notes.push("the meta-file keeps no block checksums: its blocks were not verified".into()),
    }
    let meta_whole = rep.meta_lost.is_empty();
    let first = scan(fs, meta_whole, progress)?;
    rep.problems = meta.as_ref().map(meta_problems).unwrap_or_default();
    rep.notes.extend(meta.as_ref().and_then(meta_note));
    rep.problems.extend(first.shown());
    rep.incomplete = first.shown_unread();
    rep.would_free = first.findings.iter().map(|f| if let Finding::Leak { len, .. } = f { *len } else { 0 }).sum();
    if first.unowned > 0 {
        rep.notes.push(format!(
            "{} device blocks are allocated but owned by nothing that could be read: they are not freed while the meta-data is incomplete",
            first.unowned
        ));
    }
    if !first.complete() {
        rep.notes.push(
            "the meta-data could not all be read: unreachable inodes, link counts, parents and unowned space were not judged"
                .into(),
        );
    }
    let complete = rep.is_complete();
    let repair = repair && (complete || opts.force);
    if opts.repair && !repair {
        rep.notes.push(
            "nothing was repaired: the meta-data could not all be read (--force repairs what was found anyway, never freeing space)"
                .into(),
        );
    }
    let pending =
        first.nodes.iter().filter(|(i, n)| **i != ROOT && n.nlink == 0 && !first.names.contains_key(i)).count();
    if pending > 0 {
        rep.notes
            .push(format!("{pending} unlinked inodes are still held open; they are freed at the next read-write open"));
    }
    let mut last = first;
    if repair && last.findings.iter().any(Finding::repairable) {
        // Structure first; link counts once it is right (reconnecting
        // orphans changes them). A few rounds settle any cascade.
        for _ in 0..6 {
            if last.findings.iter().any(|f| f.repairable() && !matches!(f, Finding::Nlink { .. })) {
                fix_structure(fs, &last, &mut rep.repaired)?;
            } else if last.findings.iter().any(|f| matches!(f, Finding::Nlink { .. })) {
                fix_counts(fs, &last, &mut rep.repaired)?;
            } else {
                break;
            }
            last = scan(fs, meta_whole, progress)?;
        }
        fs.checkpoint()?;
        last = scan(fs, meta_whole, progress)?;
    }
    // Blocks a copy of the meta-file got wrong: a checkpoint copies the
    // file whole to a fresh tree from the good blocks, then they are read
    // again from every copy.
    if repair && rep.meta_damaged > 0 && meta_whole && !rep.meta_unused.is_empty() {
        rep.notes.push(
            "meta-file: the copies are not rewritten while blocks no copy holds remain (the copy reads every block)"
                .into(),
        );
    } else if repair && rep.meta_damaged > 0 && meta_whole {
        fs.checkpoint()?;
        meta = check_meta(fs, progress)?;
        match meta.as_ref() {
            Some(c) if c.damaged == 0 && c.lost.is_empty() => rep.repaired.push(format!(
                "meta-file: {} blocks wrong on a copy written again from the good copy ({} block reads verified)",
                rep.meta_damaged, c.checked
            )),
            _ => rep.notes.extend(meta.as_ref().and_then(meta_note).map(|n| format!("after the repair, {n}"))),
        }
    }
    let scattered: Vec<Ino> = last.nodes.iter().filter(|(_, n)| n.scattered).map(|(&i, _)| i).collect();
    rep.scattered = scattered.len() as u64;
    if repair && !scattered.is_empty() {
        let mut moved = 0;
        for &ino in &scattered {
            // Into the group of the directory it was found in.
            if let Some(&(dir, _)) = last.names.get(&ino) {
                fs.note_parent(ino, dir);
            }
            // No room for a group is no reason to stop the check.
            match fs.regroup(ino) {
                Ok(m) => moved += m,
                Err(e) => rep.notes.push(format!("{}: not regrouped: {e}", last.path(ino))),
            }
        }
        fs.checkpoint()?;
        last = scan(fs, meta_whole, progress)?;
        let left = last.nodes.values().filter(|n| n.scattered).count() as u64;
        rep.regrouped = rep.scattered.saturating_sub(left);
        rep.notes.push(format!(
            "regrouped {} of {} files whose small-file blocks were scattered over more than one group ({moved} blocks moved)",
            rep.regrouped, rep.scattered
        ));
    } else if !scattered.is_empty() {
        rep.notes.push(format!(
            "{} files have their small-file blocks scattered over more than one group (co-location lost, data intact; --repair regroups them)",
            rep.scattered
        ));
    }
    rep.remaining = meta.as_ref().map(meta_problems).unwrap_or_default();
    rep.remaining.extend(last.shown());
    rep.incomplete = last.shown_unread();
    for n in last.nodes.values() {
        rep.inodes += 1;
        match n.kind {
            S_IFDIR => rep.dirs += 1,
            S_IFREG => {
                rep.files += 1;
                rep.bytes += n.size;
            }
            S_IFLNK => rep.symlinks += 1,
            _ => rep.specials += 1,
        }
    }
    rep.file_blocks = last.file_blocks;
    rep.used_blocks = last.used_blocks;
    rep.total_blocks = last.total_blocks;
    Ok(rep)
}

/// What a check of file data found (`fsck --data`).
#[derive(Debug, Clone, Default)]
pub struct DataReport {
    /// Regular files read.
    pub files: u64,
    /// File blocks read and verified (every copy counts).
    pub blocks: u64,
    /// Files whose layout keeps no checksums: read, but not verified.
    pub unverified_files: u64,
    /// Damaged files: path and the byte ranges (offset, length) that failed
    /// verification or could not be read from any copy.
    pub damaged: Vec<(String, Vec<(u64, u64)>)>,
    /// Devices with blocks that failed verification since the pool was
    /// opened (a bad copy of a redundant file shows here even when another
    /// copy served its data): device name and count.
    pub checksum_errors: Vec<(String, u64)>,
}

impl DataReport {
    pub fn is_clean(&self) -> bool {
        self.damaged.is_empty()
    }
}

/// Reads every block of every file through its layout (a scrub that
/// repairs nothing), verifying checksums where the layout keeps them, and
/// reports each damaged file by path with its damaged ranges. Progress is
/// reported in file blocks.
pub fn check_data(fs: &Fs, progress: Progress) -> Result<DataReport> {
    use crate::blocks::{IoCtx, Leftovers, Scrub, ScrubTally};
    /// File blocks scrubbed per call (progress granularity).
    const STEP: u64 = 16 * 1024; // 64 MiB
    let s = scan(fs, false, &mut |_, _, _| {})?;
    let files: Vec<(Ino, u64)> =
        s.nodes.iter().filter(|(_, n)| n.kind == S_IFREG).map(|(&i, n)| (i, n.size.div_ceil(BS))).collect();
    let total: u64 = files.iter().map(|f| f.1).sum();
    let mut rep = DataReport::default();
    let io = IoCtx {
        owner: 0,
        origin: crate::blocks::Origin::NONE,
        storage: fs.storage(),
        epoch: 0,
        sink: Fs::no_sink(),
        repair: false,
    };
    let mut done = 0;
    let leftovers = Leftovers::default();
    progress("data", 0, total);
    for (ino, _) in files {
        let Some(node) = fs.state().get(ino) else { continue };
        // Truncates wait; the layout and size are read under the I/O lock.
        let _io = node.io.read();
        let (lay, size) = {
            let d = node.data.read();
            match d.layout()? {
                Some(l) => (l.clone(), d.size),
                None => continue,
            }
        };
        rep.files += 1;
        if !lay.nodes().iter().any(|n| n.kind().name == "checksum") {
            rep.unverified_files += 1;
        }
        let n = size.div_ceil(BS);
        let tally = ScrubTally::default();
        let scrub = Scrub {
            repair: false,
            rebuild: &|_| false,
            resilver_only: false,
            tally: &tally,
            leftovers: &leftovers,
            verify: None,
        };
        let mut pos = 0;
        while pos < n {
            let len = STEP.min(n - pos);
            if let Err(e) = lay.root().scrub(&io, &scrub, pos, len) {
                tracing::error!(ino, fblk = pos, blocks = len, error = %e, "file data could not be checked");
                tally.lost(pos, len);
            }
            pos += len;
            done += len;
            progress("data", done, total);
        }
        rep.blocks += tally.checked.into_inner();
        let mut lost = tally.unrecoverable.into_inner();
        if lost.is_empty() {
            continue;
        }
        lost.sort_unstable();
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (f, l) in lost {
            match ranges.last_mut() {
                Some(last) if f <= last.0 + last.1 => last.1 = last.1.max(f + l - last.0),
                _ => ranges.push((f, l)),
            }
        }
        let bytes: Vec<(u64, u64)> =
            ranges.into_iter().map(|(f, l)| (f * BS, ((f + l) * BS).min(size.max(f * BS)) - f * BS)).collect();
        let path = s.path(ino);
        tracing::error!(ino, path = %path, "file data damaged");
        fs.note_data_error(ino, &bytes, crate::fs::ErrorSource::Fsck, "no copy could be read or verified", true);
        rep.damaged.push((path, bytes));
    }
    // On the pool's permanent error list (durable when the pool is writable).
    fs.persist_data_errors();
    for h in &fs.storage().devs {
        let n = h.errors().checksum;
        if n > 0 {
            rep.checksum_errors.push((format!("device {} ({})", h.index, h.name()), n));
        }
    }
    Ok(rep)
}

/// The newest valid superblock on the pool's devices.
fn read_superblock(fs: &Fs) -> Result<Superblock> {
    let mut best: Option<Superblock> = None;
    let mut buf = vec![0u8; BLOCK_SIZE];
    for d in &fs.storage().devs {
        for slot in 0..RESERVED_BLOCKS {
            // Straight from the device: a resilvering one serves no data
            // reads, but its superblocks are current; an unreadable one
            // leaves the others to decide.
            if d.dev().read_at(&mut buf, slot * BLOCK_SIZE as u64).is_err() {
                continue;
            }
            if let Ok(Some(sb)) = Superblock::decode(&buf, &d.name()) {
                if best.as_ref().is_none_or(|b| sb.generation > b.generation) {
                    best = Some(sb);
                }
            }
        }
    }
    best.ok_or_else(|| Error::corrupt("superblock", "no valid copy on any device"))
}

/// What the scan copies out of inode `ino`, and what of it could not be
/// read (a directory's entries read before a failure are kept).
fn read_node(fs: &Fs, ino: Ino) -> (Option<Node>, Option<String>) {
    let n = match fs.state().try_get(ino) {
        Ok(Some(n)) => n,
        Ok(None) => return (None, None),
        Err(e) => return (None, Some(format!("inode {ino} could not be read: {e}"))),
    };
    let d = n.data.read();
    let mut node = Node {
        kind: d.kind(),
        nlink: d.nlink,
        size: d.size,
        parent: 0,
        entries: Vec::new(),
        dir_layout: String::new(),
        symlink_len: None,
        extents: Vec::new(),
        capacity: u64::MAX,
        scattered: false,
    };
    let mut err = None;
    match &d.body {
        Body::File(l) => match l.get() {
            Ok(l) => {
                l.extents(&mut |dev, s, len| node.extents.push((dev, s, len)));
                node.capacity = l.root().capacity();
                node.scattered = l.nodes().iter().any(|b| !b.scattered().is_empty());
            }
            Err(e) => err = Some(format!("layout could not be read: {e}")),
        },
        Body::Dir(dir) => {
            node.parent = dir.parent;
            node.dir_layout = dir.layout.clone();
            let r = dir.for_each_from(0, &mut |_, name, e| {
                node.entries.push((name.to_vec(), e.ino, e.kind));
                true
            });
            if let Err(e) = r {
                err = Some(format!("entries could not all be read ({} read): {e}", node.entries.len()));
            }
            node.entries.sort();
        }
        Body::Symlink(t) => node.symlink_len = Some(t.len() as u64),
        Body::Special => {}
    }
    (Some(node), err)
}

/// One pass over the meta-data. `meta_whole`: every meta-file block has a
/// verified copy (space owned by nothing is reported only then).
fn scan(fs: &Fs, meta_whole: bool, progress: Progress) -> Result<Scan> {
    let mut nodes = BTreeMap::new();
    let mut unread = Vec::new();
    let mut unreadable = BTreeSet::new();
    let mut add = |ino: Ino, nodes: &mut BTreeMap<Ino, Node>| {
        let (node, err) = read_node(fs, ino);
        match (node, err) {
            (Some(n), err) => {
                nodes.insert(ino, n);
                if let Some(e) = err {
                    unread.push((Some(ino), e));
                }
            }
            (None, Some(e)) => {
                unreadable.insert(ino);
                unread.push((None, e));
            }
            (None, None) => {}
        }
    };
    match fs.state().inos() {
        Ok(all) => {
            let total = all.len() as u64;
            for (i, &ino) in all.iter().enumerate() {
                if i % 4096 == 0 {
                    progress("inodes", i as u64, total);
                }
                add(ino, &mut nodes);
            }
            progress("inodes", total, total);
        }
        Err(e) => {
            // Without the table's listing: the inodes the directories
            // reach, from the root.
            let mut q = VecDeque::from([ROOT]);
            let mut seen = HashSet::from([ROOT]);
            while let Some(ino) = q.pop_front() {
                if seen.len() % 4096 == 0 {
                    progress("inodes", seen.len() as u64, 0);
                }
                add(ino, &mut nodes);
                for (_, c, _) in nodes.get(&ino).map(|n| n.entries.as_slice()).unwrap_or_default() {
                    if seen.insert(*c) {
                        q.push_back(*c);
                    }
                }
            }
            unread.insert(
                0,
                (
                    None,
                    format!(
                        "the inode table could not be listed ({e}): only inodes reachable from the root were checked"
                    ),
                ),
            );
        }
    }
    let mut s = Scan {
        nodes,
        names: HashMap::new(),
        findings: Vec::new(),
        file_blocks: 0,
        used_blocks: 0,
        total_blocks: 0,
        unread,
        unreadable,
        unowned: 0,
    };
    check_names(&mut s, progress);
    check_inodes(fs, &mut s);
    check_space(fs, &mut s, meta_whole, progress)?;
    Ok(s)
}

/// Entries, reachability, parents and link counts.
fn check_names(s: &mut Scan, progress: Progress) {
    let mut f = Vec::new();
    // Links to each inode, and which entries name each directory.
    let mut refs: HashMap<Ino, u32> = HashMap::new();
    let mut dir_refs: HashMap<Ino, Vec<(Ino, Vec<u8>)>> = HashMap::new();
    for (&dir, n) in &s.nodes {
        for (name, ino, kind) in &n.entries {
            match s.nodes.get(ino) {
                // Its record could not be read: it may well exist.
                None if s.unreadable.contains(ino) => {}
                None => f.push(Finding::Dangling { dir, name: name.clone(), target: *ino }),
                Some(t) => {
                    if t.kind != *kind & S_IFMT {
                        f.push(Finding::KindMismatch {
                            dir,
                            name: name.clone(),
                            ino: *ino,
                            recorded: *kind,
                            actual: t.kind,
                        });
                    }
                    *refs.entry(*ino).or_default() += 1;
                    if t.kind == S_IFDIR {
                        dir_refs.entry(*ino).or_default().push((dir, name.clone()));
                    }
                }
            }
        }
    }
    // A directory has one entry: the one in its ".." if that is among them.
    let mut kept: HashMap<Ino, (Ino, Vec<u8>)> = HashMap::new();
    for (&ino, list) in &dir_refs {
        let parent = s.nodes.get(&ino).map(|n| n.parent).unwrap_or(0);
        let keep = list.iter().find(|(d, _)| *d == parent).unwrap_or(&list[0]).clone();
        if ino == ROOT {
            for (d, name) in list {
                f.push(Finding::ExtraDirLink { dir: *d, name: name.clone(), ino });
            }
            continue;
        }
        for (d, name) in list {
            if (d, name) != (&keep.0, &keep.1) {
                f.push(Finding::ExtraDirLink { dir: *d, name: name.clone(), ino });
            }
        }
        kept.insert(ino, keep);
    }
    // Reachability from the root, through valid entries only.
    let usable = |dir: Ino, name: &[u8], ino: Ino, nodes: &BTreeMap<Ino, Node>| -> bool {
        match nodes.get(&ino) {
            None => false,
            Some(t) if t.kind == S_IFDIR => ino != ROOT && kept.get(&ino).is_some_and(|(d, n)| *d == dir && n == name),
            Some(_) => true,
        }
    };
    let mut names = HashMap::new();
    let mut seen = HashSet::from([ROOT]);
    let mut q = VecDeque::from([ROOT]);
    let total = s.nodes.len() as u64;
    while let Some(d) = q.pop_front() {
        if seen.len() % 4096 == 0 {
            progress("directories", seen.len() as u64, total);
        }
        let Some(n) = s.nodes.get(&d) else { continue };
        for (name, ino, _) in &n.entries {
            if usable(d, name, *ino, &s.nodes) && seen.insert(*ino) {
                names.insert(*ino, (d, name.clone()));
                if s.nodes.get(ino).is_some_and(|t| t.kind == S_IFDIR) {
                    q.push_back(*ino);
                }
            }
        }
    }
    progress("directories", total, total);
    // Unreachable inodes with links: report the top of each unreachable tree.
    let unreachable: Vec<Ino> =
        s.nodes.iter().filter(|(i, n)| !seen.contains(i) && n.nlink > 0).map(|(i, _)| *i).collect();
    let mut covered: HashSet<Ino> = HashSet::new();
    let closure = |top: Ino, covered: &mut HashSet<Ino>, nodes: &BTreeMap<Ino, Node>| -> usize {
        let mut count = 0;
        let mut st = vec![top];
        covered.insert(top);
        while let Some(d) = st.pop() {
            if let Some(n) = nodes.get(&d) {
                for (_, c, _) in &n.entries {
                    if !seen.contains(c) && nodes.contains_key(c) && covered.insert(*c) {
                        count += 1;
                        st.push(*c);
                    }
                }
            }
        }
        count
    };
    // Tops: named by no entry at all; then (cycles) the lowest directory left.
    let mut tops = Vec::new();
    for &u in &unreachable {
        if refs.get(&u).copied().unwrap_or(0) == 0 && !covered.contains(&u) {
            let beneath = closure(u, &mut covered, &s.nodes);
            tops.push((u, beneath));
        }
    }
    loop {
        let next = unreachable
            .iter()
            .find(|u| !covered.contains(u) && s.nodes.get(u).is_some_and(|n| n.kind == S_IFDIR))
            .or_else(|| unreachable.iter().find(|u| !covered.contains(u)));
        let Some(&u) = next else { break };
        let beneath = closure(u, &mut covered, &s.nodes);
        tops.push((u, beneath));
    }
    for (ino, beneath) in tops {
        let kind = s.nodes.get(&ino).map(|n| n.kind).unwrap_or(0);
        f.push(Finding::Orphan { ino, kind, beneath });
    }
    // Parents and link counts.
    for (&ino, n) in &s.nodes {
        if n.kind == S_IFDIR {
            if ino == ROOT {
                if n.parent != ROOT {
                    f.push(Finding::RootNotOwnParent { recorded: n.parent });
                }
            } else if let Some((d, _)) = kept.get(&ino) {
                // An orphan's ".." is set when it is reconnected.
                if n.parent != *d && seen.contains(&ino) {
                    f.push(Finding::WrongParent { ino, recorded: n.parent, actual: *d });
                }
            }
        }
        // Unlinked inodes held open are not counted (they are reaped later).
        if n.nlink == 0 && !refs.contains_key(&ino) && ino != ROOT {
            continue;
        }
        let want = if n.kind == S_IFDIR {
            let subdirs = n
                .entries
                .iter()
                .filter(|(name, c, _)| {
                    s.nodes.get(c).is_some_and(|t| t.kind == S_IFDIR) && usable(ino, name, *c, &s.nodes)
                })
                .count();
            2 + subdirs as u32
        } else {
            refs.get(&ino).copied().unwrap_or(0)
        };
        // An orphan's count is judged once it is reconnected.
        if n.nlink != want && seen.contains(&ino) {
            f.push(Finding::Nlink { ino, has: n.nlink, want });
        }
    }
    s.names = names;
    if !s.complete() {
        // What is missing from an incomplete walk may be in what could not
        // be read: nothing is judged on its absence.
        f.retain(|x| {
            !matches!(
                x,
                Finding::Orphan { .. }
                    | Finding::Nlink { .. }
                    | Finding::WrongParent { .. }
                    | Finding::ExtraDirLink { .. }
            )
        });
    }
    s.findings.extend(f);
}

/// Sizes, symlinks and directory default layouts.
fn check_inodes(fs: &Fs, s: &mut Scan) {
    let info = fs.pool_info();
    for (&ino, n) in &s.nodes {
        if n.kind == S_IFREG {
            let max = n.capacity.saturating_mul(BS).min(MAX_FILE_SIZE);
            if n.size > max {
                s.findings.push(Finding::Size { ino, size: n.size, max });
            }
        }
        if let Some(len) = n.symlink_len {
            if len == 0 {
                s.findings.push(Finding::SymlinkEmpty { ino });
            } else if n.size != len {
                s.findings.push(Finding::SymlinkSize { ino, size: n.size, len });
            }
        }
        if n.kind == S_IFDIR && !n.dir_layout.is_empty() {
            if let Err(e) = layout::parse(&n.dir_layout).and_then(|p| layout::resolve(&p, &info)) {
                s.findings.push(Finding::BadDirLayout { ino, spec: n.dir_layout.clone(), err: e.to_string() });
            }
        }
    }
}

/// Device extents: each inside its device, none claimed twice, and the
/// allocators' free maps exactly the complement of what is claimed.
fn check_space(fs: &Fs, s: &mut Scan, meta_whole: bool, progress: Progress) -> Result<()> {
    // Space is called owned by nothing only on the evidence of all the
    // meta-data.
    let judge_leaks = meta_whole && s.complete();
    let storage = fs.storage();
    let ndev = storage.devs.len();
    // Per device: (start, len, owner).
    let mut claims: Vec<Vec<(u64, u64, String)>> = vec![Vec::new(); ndev];
    let mut bad = Vec::new();
    let mut push =
        |owner: &dyn Fn() -> String, dev: u32, start: u64, len: u64, claims: &mut Vec<Vec<(u64, u64, String)>>| {
            let why = match storage.devs.get(dev as usize) {
                None => Some(format!("names a device the pool does not have ({ndev} devices)")),
                Some(_) if len == 0 => Some("is empty".to_string()),
                Some(_) if start < RESERVED_BLOCKS => Some("overlaps the superblocks".to_string()),
                Some(d) if start.checked_add(len).is_none_or(|e| e > d.blocks()) => {
                    Some(format!("runs past the end of the device ({} blocks)", d.blocks()))
                }
                Some(_) => None,
            };
            match why {
                Some(why) => bad.push(Finding::BadExtent { owner: owner(), dev, start, len, why }),
                None => claims[dev as usize].push((start, len, owner())),
            }
        };
    match read_superblock(fs) {
        Ok(sb) => {
            let j = sb.journal;
            push(&|| "journal".into(), j.dev, j.start, j.blocks, &mut claims);
            for m in &sb.journal_copies {
                push(&|| "journal copy".into(), m.dev, m.start, m.blocks, &mut claims);
            }
            match Layout::decode(&mut Decoder::new(&sb.meta_layout, "meta-file layout")) {
                Ok(meta) => meta.extents(&mut |d, st, l| push(&|| "meta-file".into(), d, st, l, &mut claims)),
                Err(e) => s.findings.push(Finding::Superblock { err: format!("meta-file layout: {e}") }),
            }
        }
        Err(e) => s.findings.push(Finding::Superblock { err: e.to_string() }),
    }
    // Blocks the log heads of an open pool hold for their next writes.
    let mut heads = Vec::new();
    fs.log_unused(&mut heads);
    for (d, st, l) in heads {
        push(&|| "log head".into(), d, st, l, &mut claims);
    }
    let total = s.nodes.len() as u64;
    let mut file_blocks = 0;
    for (i, (&ino, n)) in s.nodes.iter().enumerate() {
        if i % 4096 == 0 {
            progress("space", i as u64, total);
        }
        for &(d, st, l) in &n.extents {
            file_blocks += l;
            push(&|| format!("inode {ino}"), d, st, l, &mut claims);
        }
    }
    progress("space", total, total);
    s.findings.extend(bad);
    s.file_blocks = file_blocks;
    for (dev, list) in claims.iter_mut().enumerate() {
        let dev32 = dev as u32;
        list.sort_by_key(|c| c.0);
        // Overlaps, and the union of what is claimed.
        let mut union: Vec<(u64, u64)> = Vec::new();
        let mut reach: Option<(u64, usize)> = None; // furthest end so far and its claim
        for (i, (st, l, owner)) in list.iter().enumerate() {
            let end = st + l;
            if let Some((r, j)) = reach {
                if *st < r {
                    let e = end.min(r);
                    s.findings.push(Finding::DoubleClaim {
                        dev: dev32,
                        start: *st,
                        len: e - st,
                        a: list[j].2.clone(),
                        b: owner.clone(),
                    });
                }
            }
            if reach.is_none_or(|(r, _)| end > r) {
                reach = Some((end, i));
            }
            match union.last_mut() {
                Some((us, ul)) if *st <= *us + *ul => *ul = (*ul).max(end - *us),
                _ => union.push((*st, *l)),
            }
        }
        let a = &storage.allocs[dev];
        let used: u64 = union.iter().map(|u| u.1).sum();
        s.used_blocks += used;
        s.total_blocks += a.total_blocks();
        // Allocated per the free map = [RESERVED, total) minus free extents.
        let mut allocated = Vec::new();
        let mut pos = RESERVED_BLOCKS;
        for (fs_, fl) in a.free_extents() {
            if fs_ > pos {
                allocated.push((pos, fs_ - pos));
            }
            pos = pos.max(fs_ + fl);
        }
        if a.total_blocks() > pos {
            allocated.push((pos, a.total_blocks() - pos));
        }
        for (st, l) in difference(&allocated, &union) {
            if judge_leaks {
                s.findings.push(Finding::Leak { dev: dev32, start: st, len: l });
            } else {
                s.unowned += l;
            }
        }
        for (st, l) in difference(&union, &allocated) {
            s.findings.push(Finding::ClaimedFree { dev: dev32, start: st, len: l });
        }
    }
    Ok(())
}

/// Blocks in sorted, disjoint `a` that are not in sorted, disjoint `b`.
fn difference(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut j = 0;
    for &(s, l) in a {
        let (mut pos, end) = (s, s + l);
        while j < b.len() && b[j].0 + b[j].1 <= pos {
            j += 1;
        }
        let mut k = j;
        while pos < end {
            match b.get(k) {
                Some(&(bs, bl)) if bs < end => {
                    if bs > pos {
                        out.push((pos, bs - pos));
                    }
                    pos = pos.max(bs + bl);
                    k += 1;
                }
                _ => {
                    out.push((pos, end - pos));
                    pos = end;
                }
            }
        }
    }
    out
}

/// Runs `f` on the locked inodes inside the journal gate, logging `ops`
/// that `f` returns (after applying them).
fn with_locked(fs: &Fs, inos: &[Ino], f: impl FnOnce(&mut crate::namespace::Locked) -> Result<Vec<Op>>) -> Result<()> {
    let g = fs.inner.gate.enter();
    let mut l = fs.state().lock(inos);
    let ops = f(&mut l)?;
    for op in &ops {
        fs.state().apply(op, &mut l)?;
    }
    fs.log(&g, &ops);
    Ok(())
}

/// The directory orphans go to, made if missing.
fn lost_found(fs: &Fs) -> Result<Ino> {
    let root = Creds::root();
    for i in 0..100 {
        let name = if i == 0 { LOST_FOUND.to_string() } else { format!("{LOST_FOUND}.{i}") };
        match fs.lookup(&root, ROOT, name.as_bytes()) {
            Ok(a) if a.is_dir() => return Ok(a.ino),
            Ok(_) => continue,
            Err(Error::NotFound(_)) => return Ok(fs.mkdir(&root, ROOT, name.as_bytes(), 0o700)?.ino),
            Err(e) => return Err(e),
        }
    }
    Err(Error::Exists(format!("/{LOST_FOUND} (and 99 alternatives)")))
}

fn fix_structure(fs: &Fs, s: &Scan, done: &mut Vec<String>) -> Result<()> {
    let now = crate::fs::now();
    let mut lf: Option<Ino> = None;
    // Entries naming each orphaned directory (cycles), found once.
    let mut naming: HashMap<Ino, Vec<(Ino, Vec<u8>)>> = HashMap::new();
    if s.findings.iter().any(|f| matches!(f, Finding::Orphan { kind: S_IFDIR, .. })) {
        for (&d, n) in &s.nodes {
            for (name, c, _) in &n.entries {
                naming.entry(*c).or_default().push((d, name.clone()));
            }
        }
    }
    for finding in &s.findings {
        let what = Shown(finding, s).to_string();
        match finding {
            Finding::Dangling { dir, name, .. } | Finding::ExtraDirLink { dir, name, .. } => {
                // No journal op unlinks an entry without its inode: change
                // the state (the closing checkpoint records it).
                with_locked(fs, &[*dir], |l| {
                    if let Some(d) = l.get(*dir)?.dir_mut() {
                        d.remove(name)?;
                    }
                    Ok(vec![])
                })?;
                done.push(format!("removed entry {}", s.child_path(*dir, name)));
            }
            Finding::KindMismatch { dir, name, ino, actual, .. } => {
                with_locked(fs, &[*dir], |l| {
                    if let Some(d) = l.get(*dir)?.dir_mut() {
                        d.insert(name.clone(), *ino, *actual)?;
                    }
                    Ok(vec![])
                })?;
                done.push(format!("{}: entry type set to {}", s.child_path(*dir, name), kind_name(*actual)));
            }
            Finding::WrongParent { ino, actual, .. } => {
                with_locked(fs, &[*ino], |l| {
                    if let Some(d) = l.get(*ino)?.dir_mut() {
                        d.parent = *actual;
                    }
                    Ok(vec![])
                })?;
                done.push(format!("{}: \"..\" set to inode {actual}", s.path(*ino)));
            }
            Finding::RootNotOwnParent { .. } => {
                with_locked(fs, &[ROOT], |l| {
                    if let Some(d) = l.get(ROOT)?.dir_mut() {
                        d.parent = ROOT;
                    }
                    Ok(vec![])
                })?;
                done.push("/: \"..\" set to itself".into());
            }
            Finding::Orphan { ino, kind, .. } => {
                let dir = match lf {
                    Some(d) => d,
                    None => *lf.insert(lost_found(fs)?),
                };
                // An orphaned directory in a cycle loses its other entries first.
                if *kind == S_IFDIR {
                    for (d, name) in naming.get(ino).into_iter().flatten() {
                        with_locked(fs, &[*d], |l| {
                            if let Some(x) = l.get(*d)?.dir_mut() {
                                x.remove(name)?;
                            }
                            Ok(vec![])
                        })?;
                    }
                }
                let mut name = format!("#{ino}");
                let mut i = 1;
                while fs.lookup(&Creds::root(), dir, name.as_bytes()).is_ok() {
                    name = format!("#{ino}.{i}");
                    i += 1;
                }
                with_locked(fs, &[dir, *ino], |_| {
                    Ok(vec![Op::Link { dir, name: name.clone().into_bytes(), ino: *ino, time: now }])
                })?;
                done.push(format!("inode {ino} ({}) reconnected as /{LOST_FOUND}/{name}", kind_name(*kind)));
            }
            Finding::Size { ino, max, .. } => {
                with_locked(fs, &[*ino], |_| Ok(vec![Op::SetSize { ino: *ino, size: *max, mtime: now }]))?;
                done.push(format!("{}: size set to {max}", s.path(*ino)));
            }
            Finding::SymlinkSize { ino, len, .. } => {
                with_locked(fs, &[*ino], |l| {
                    l.get(*ino)?.size = *len;
                    Ok(vec![])
                })?;
                done.push(format!("{}: size set to {len}", s.path(*ino)));
            }
            Finding::BadDirLayout { ino, .. } => {
                with_locked(fs, &[*ino], |_| Ok(vec![Op::SetDirLayout { ino: *ino, spec: String::new() }]))?;
                done.push(format!("{}: invalid default layout cleared", s.path(*ino)));
            }
            Finding::Leak { dev, start, len } => {
                fs.storage().allocs[*dev as usize].free_now(*start, *len);
                done.push(format!("device {dev} blocks {start}..{} returned to the free map", start + len));
            }
            Finding::ClaimedFree { dev, start, len } => {
                fs.storage().allocs[*dev as usize].mark_used(*start, *len);
                done.push(format!("device {dev} blocks {start}..{} marked in use", start + len));
            }
            Finding::Nlink { .. } => {} // after the structure is fixed
            Finding::BadExtent { .. }
            | Finding::DoubleClaim { .. }
            | Finding::SymlinkEmpty { .. }
            | Finding::Superblock { .. } => {
                tracing::warn!("fsck cannot repair: {what}");
            }
        }
    }
    Ok(())
}

fn fix_counts(fs: &Fs, s: &Scan, done: &mut Vec<String>) -> Result<()> {
    for finding in &s.findings {
        if let Finding::Nlink { ino, has, want } = finding {
            with_locked(fs, &[*ino], |l| {
                l.get(*ino)?.nlink = *want;
                Ok(vec![])
            })?;
            done.push(format!("{}: link count {has} -> {want}", s.path(*ino)));
        }
    }
    Ok(())
}

/// Damage a test can do to a pool's meta-data, to exercise the checker.
#[doc(hidden)]
#[derive(Debug, Clone)]
pub enum Damage {
    /// Removes a directory entry, leaving its inode linked: an orphan.
    DropEntry { path: String },
    /// Sets an inode's link count.
    SetNlink { path: String, nlink: u32 },
    /// Adds an entry `name` in directory `dir` naming a missing inode.
    Dangling { dir: String, name: String },
    /// Points a directory's ".." at another directory.
    SetParent { path: String, parent: String },
}

/// Applies `damage` to the in-memory state and checkpoints it. For tests of
/// `fsck` only: this deliberately makes the pool inconsistent.
#[doc(hidden)]
pub fn inject(fs: &Fs, damage: &Damage) -> Result<()> {
    let split = |p: &str| -> Result<(Ino, Vec<u8>)> {
        let p = p.trim_end_matches('/');
        let (dir, name) = p.rsplit_once('/').unwrap_or(("", p));
        Ok((fs.resolve(if dir.is_empty() { "/" } else { dir })?, name.as_bytes().to_vec()))
    };
    match damage {
        Damage::DropEntry { path } => {
            let (dir, name) = split(path)?;
            with_locked(fs, &[dir], |l| {
                l.get(dir)?
                    .dir_mut()
                    .map(|d| d.remove(&name))
                    .transpose()?
                    .flatten()
                    .ok_or_else(|| Error::NotFound(path.clone()))?;
                Ok(vec![])
            })?;
        }
        Damage::SetNlink { path, nlink } => {
            let ino = fs.resolve_as(&Creds::root(), path, false)?;
            with_locked(fs, &[ino], |l| {
                l.get(ino)?.nlink = *nlink;
                Ok(vec![])
            })?;
        }
        Damage::Dangling { dir, name } => {
            let d = fs.resolve(dir)?;
            let missing = fs.state().alloc_ino() + 1000;
            with_locked(fs, &[d], |l| {
                l.get(d)?.dir_mut().ok_or_else(|| Error::NotDir(dir.clone()))?.insert(
                    name.as_bytes().to_vec(),
                    missing,
                    S_IFREG,
                )?;
                Ok(vec![])
            })?;
        }
        Damage::SetParent { path, parent } => {
            let ino = fs.resolve(path)?;
            let p = fs.resolve(parent)?;
            with_locked(fs, &[ino], |l| {
                l.get(ino)?.dir_mut().ok_or_else(|| Error::NotDir(path.clone()))?.parent = p;
                Ok(vec![])
            })?;
        }
    }
    fs.checkpoint()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Device, MemDevice};
    use crate::{FormatOptions, Options};
    use std::sync::Arc;

    fn pool(n: usize) -> Fs {
        let devs: Vec<Arc<dyn Device>> =
            (0..n).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), 64 << 20)) as Arc<dyn Device>).collect();
        Fs::format(devs.clone(), &FormatOptions::default()).unwrap();
        Fs::open(devs, Options { background_commit: false, ..Options::default() }).unwrap()
    }

    fn populate(fs: &Fs) {
        fs.mkdir_all("/a/b/c", 0o755).unwrap();
        fs.write_file("/a/f1", &vec![1u8; 100_000], None).unwrap();
        fs.write_file("/a/b/f2", b"hello", Some("inline")).unwrap();
        fs.write_file("/a/b/c/f3", &vec![3u8; 300_000], Some("extent@1")).unwrap();
        fs.hard_link("/a/f1", "/a/b/c/f1link").unwrap();
        fs.symlink_path("../f1", "/a/b/sym").unwrap();
    }

    fn run(fs: &Fs, repair: bool) -> FsckReport {
        check(fs, repair, &mut |_, _, _| {}).unwrap()
    }

    #[test]
    fn data_check_lists_damaged_files_by_path_and_range() {
        let fs = pool(3);
        populate(&fs);
        fs.sync().unwrap();
        let clean = check_data(&fs, &mut |_, _, _| {}).unwrap();
        assert!(clean.is_clean(), "{:?}", clean.damaged);
        assert_eq!((clean.files, clean.unverified_files), (3, 1), "{clean:?}");
        assert!(clean.blocks >= 25 + 74, "{clean:?}");
        // Damage file block 1 of /a/b/c/f3 (all 3s, on device 1) on the medium.
        let ino = fs.resolve("/a/b/c/f3").unwrap();
        let n = fs.state().inode(ino).unwrap();
        let lay = n.data.read().layout().unwrap().cloned().unwrap();
        let mut first = None;
        lay.extents(&mut |d, p, _| first = first.or(Some((d, p))));
        let (dev, p) = first.unwrap();
        assert_eq!(dev, 1);
        fs.storage().devs[1].dev().write_at(&[0u8; 8], (p + 1) * BS + 10).unwrap();
        let r = check_data(&fs, &mut |_, _, _| {}).unwrap();
        assert_eq!(r.damaged, vec![("/a/b/c/f3".to_string(), vec![(BS, BS)])]);
        assert_eq!(r.checksum_errors.len(), 1, "{:?}", r.checksum_errors);
        assert!(r.checksum_errors[0].0.contains("mem1"), "{:?}", r.checksum_errors);
        // Meta-data is intact: the plain check does not see data damage.
        assert!(run(&fs, false).is_clean());
    }

    #[test]
    fn fresh_and_used_pools_are_clean() {
        let fs = pool(3);
        let r = run(&fs, false);
        assert!(r.is_clean(), "{:?}", r.remaining);
        populate(&fs);
        fs.remove("/a/b/c/f1link").unwrap();
        fs.rename_path("/a/b/c", "/c").unwrap();
        fs.write_file("/gone", &vec![9u8; 50_000], None).unwrap();
        fs.sync().unwrap();
        fs.remove("/gone").unwrap();
        let r = run(&fs, false);
        assert!(r.is_clean(), "{:?}", r.remaining);
        assert_eq!(r.dirs, 4);
        assert_eq!(r.files, 3);
        assert_eq!(r.symlinks, 1);
        assert_eq!(r.bytes, 400_005);
        assert!(r.file_blocks >= 98, "{}", r.file_blocks);
    }

    #[test]
    fn orphans_are_reconnected_and_counts_fixed() {
        let fs = pool(2);
        populate(&fs);
        inject(&fs, &Damage::DropEntry { path: "/a/b".into() }).unwrap();
        inject(&fs, &Damage::SetNlink { path: "/a/f1".into(), nlink: 7 }).unwrap();
        inject(&fs, &Damage::Dangling { dir: "/a".into(), name: "ghost".into() }).unwrap();
        inject(&fs, &Damage::DropEntry { path: "/c".into() }).unwrap_err();
        let r = run(&fs, false);
        assert!(!r.is_clean());
        let all = r.problems.join("\n");
        assert!(all.contains("not reachable"), "{all}");
        assert!(all.contains("/a/f1: link count is 7, should be 2"), "{all}");
        assert!(all.contains("/a/ghost"), "{all}");
        let r = run(&fs, true);
        assert!(r.is_clean(), "left: {:?}\nrepaired: {:?}", r.remaining, r.repaired);
        assert!(r.repaired.iter().any(|x| x.contains("lost+found")), "{:?}", r.repaired);
        let again = run(&fs, false);
        assert!(again.is_clean() && again.problems.is_empty(), "{:?}", again.problems);
        // The reconnected tree is whole.
        let lf = fs.read_dir("/lost+found").unwrap();
        assert_eq!(lf.len(), 1);
        let name = String::from_utf8(lf[0].name.clone()).unwrap();
        assert_eq!(fs.read_file(&format!("/lost+found/{name}/f2")).unwrap(), b"hello");
        assert_eq!(fs.read_file(&format!("/lost+found/{name}/c/f3")).unwrap().len(), 300_000);
        assert_eq!(fs.stat("/a/f1").unwrap().nlink, 2);
    }

    #[test]
    fn parents_and_cycles() {
        let fs = pool(2);
        populate(&fs);
        inject(&fs, &Damage::SetParent { path: "/a/b/c".into(), parent: "/".into() }).unwrap();
        let r = run(&fs, false);
        assert!(r.problems.iter().any(|p| p.contains("\"..\"")), "{:?}", r.problems);
        let r = run(&fs, true);
        assert!(r.is_clean(), "{:?}", r.remaining);
        assert!(run(&fs, false).problems.is_empty());
        // A directory cycle cut off from the root.
        fs.mkdir_all("/x/y", 0o755).unwrap();
        let y = fs.resolve("/x/y").unwrap();
        let x = fs.resolve("/x").unwrap();
        with_locked(&fs, &[y], |l| {
            l.get(y)?.dir_mut().unwrap().insert(b"back".to_vec(), x, S_IFDIR)?;
            Ok(vec![])
        })
        .unwrap();
        inject(&fs, &Damage::DropEntry { path: "/x".into() }).unwrap();
        let r = run(&fs, false);
        assert!(r.problems.iter().any(|p| p.contains("not reachable")), "{:?}", r.problems);
        let r = run(&fs, true);
        assert!(r.is_clean(), "{:?}", r.remaining);
        assert!(run(&fs, false).problems.is_empty());
    }

    #[test]
    fn repairs_survive_reopen() {
        let devs: Vec<Arc<dyn Device>> =
            (0..2).map(|i| Arc::new(MemDevice::new(format!("mem{i}"), 64 << 20)) as Arc<dyn Device>).collect();
        Fs::format(devs.clone(), &FormatOptions::default()).unwrap();
        let opts = || Options { background_commit: false, ..Options::default() };
        let fs = Fs::open(devs.clone(), opts()).unwrap();
        populate(&fs);
        inject(&fs, &Damage::DropEntry { path: "/a/b/c/f3".into() }).unwrap();
        fs.close().unwrap();
        let fs = Fs::open(devs.clone(), opts()).unwrap();
        assert!(!run(&fs, true).problems.is_empty());
        fs.close().unwrap();
        let fs = Fs::open(devs, Options { read_only: true, ..opts() }).unwrap();
        let r = run(&fs, false);
        assert!(r.problems.is_empty(), "{:?}", r.problems);
    }

    #[test]
    fn difference_of_interval_lists() {
        assert_eq!(difference(&[(0, 10)], &[(2, 3), (7, 1)]), vec![(0, 2), (5, 2), (8, 2)]);
        assert_eq!(difference(&[(0, 10), (20, 5)], &[(0, 30)]), vec![]);
        assert_eq!(difference(&[(5, 5)], &[]), vec![(5, 5)]);
    }
}
