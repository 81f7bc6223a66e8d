//! The checker: cuts the recorded log, builds crash states at each cut,
//! opens each with `Fs::open` (no manual repair), runs fsck, and compares
//! what it finds with the states the workload may legally leave there.

use super::image::{Durable, Mode, StateKey};
use super::model::{content_diffs, describe_diff, observe, same_meta, subtree, Tree};
use super::record::{Event, Recorder, RecordingDevice};
use super::workloads::{SyncRec, ThreadHist};
use super::Violation;
use crate::device::Device;
use crate::{fsck, Fs, Options};
use rand::{rngs::StdRng, seq::SliceRandom, Rng, SeedableRng};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

/// Everything a recorded workload left for the checker.
pub(crate) struct Recorded {
    pub workload: String,
    pub seed: u64,
    pub base: Vec<Arc<Vec<u8>>>,
    pub events: Vec<Event>,
    pub threads: Vec<ThreadHist>,
    pub syncs: Vec<SyncRec>,
    /// The background committer ran: any operation boundary may be durable.
    pub background: bool,
    /// The `txn` workload's transactions (checked instead of threads' trees).
    pub txn: Option<super::txn::TxnHist>,
}

/// What checking one cut found.
#[derive(Default)]
pub(crate) struct CutResult {
    pub states: usize,
    /// Of them, states of a second crash during the recovery of a first.
    pub recovery_states: usize,
    /// States that showed a sync that had not returned at the cut.
    pub newer: usize,
    /// States of crashes during recovery not opened because one with the
    /// same bytes had been (the plan's own are counted by [`plan`]).
    pub same: usize,
    pub violations: Vec<Violation>,
}

/// Picks `n` cut positions: about half right after flushes (every flush
/// when there are few), the rest at random points between flushes. A cut
/// `p` keeps the first `p` events.
pub(crate) fn choose_cuts(events: &[Event], n: usize, seed: u64) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xC0FF_EE00);
    let flushes: Vec<usize> =
        events.iter().enumerate().filter(|(_, e)| matches!(e, Event::Flush { .. })).map(|(i, _)| i + 1).collect();
    let fset: HashSet<usize> = flushes.iter().copied().collect();
    let mut others: Vec<usize> = (0..=events.len()).filter(|p| !fset.contains(p)).collect();
    others.shuffle(&mut rng);
    let want_f = (n / 2).max(n.saturating_sub(others.len())).min(flushes.len());
    let mut cuts: BTreeSet<usize> = BTreeSet::new();
    for k in 0..want_f {
        cuts.insert(flushes[k * flushes.len() / want_f]);
    }
    for p in others {
        if cuts.len() >= n {
            break;
        }
        cuts.insert(p);
    }
    cuts.into_iter().collect()
}

/// Where a cut lies, in words.
pub(crate) fn describe_cut(events: &[Event], p: usize) -> String {
    if p == 0 {
        return "before the first write".into();
    }
    match &events[p - 1] {
        Event::Flush { dev } => format!("right after event {} (flush of device {dev})", p - 1),
        Event::Write { dev, off, data } => {
            let since =
                events[..p].iter().rev().take_while(|e| !matches!(e, Event::Flush { dev: d } if d == dev)).count();
            format!(
                "after event {} (write of {} bytes at {off:#x} to device {dev}; {since} writes since its last flush)",
                p - 1,
                data.len()
            )
        }
    }
}

fn modes(rng: &mut StdRng, pieces: &[super::image::Piece], long: bool) -> Vec<Mode> {
    let n = pieces.len();
    let mut v = vec![Mode::Drop];
    if n == 0 {
        return v;
    }
    let mut devs: Vec<u32> = pieces.iter().map(|p| p.dev).collect();
    devs.sort_unstable();
    devs.dedup();
    v.push(Mode::Keep);
    v.push(Mode::Prefix(rng.gen_range(0..n)));
    v.push(Mode::Random { seed: rng.gen(), pct: 50 });
    if long {
        v.push(Mode::Prefix(rng.gen_range(0..n)));
        v.push(Mode::Suffix(rng.gen_range(1..=n)));
        for d in &devs {
            v.push(Mode::Device(*d));
        }
        for pct in [20, 50, 80] {
            v.push(Mode::Random { seed: rng.gen(), pct });
        }
    } else if devs.len() > 1 && rng.gen_bool(0.5) {
        v.push(Mode::Device(devs[rng.gen_range(0..devs.len())]));
    } else {
        v.push(Mode::Suffix(rng.gen_range(1..=n)));
    }
    v
}

/// One crash state to open: a cut, and which of the writes unflushed
/// there reached the media.
pub(crate) struct Planned {
    p: usize,
    mode: Mode,
    keep: Vec<bool>,
}

/// The crash states of the cuts (ascending), each opened once, and how many
/// more were skipped as the same.
///
/// A state's verdict depends on its bytes and on the cut only through
/// which recorded marks (the starts and ends of operations, syncs and
/// transactions) lie before it: cuts with no mark between them are judged
/// by the same rules. A cut right after a flush and a later one before the
/// next flush, for example, leave the same durable images, so dropping the
/// unflushed writes gives the same state at both: it is planned once, at
/// the first. Planning runs in one thread, so the states chosen do not
/// depend on how the checking is spread over threads.
pub(crate) fn plan(rec: &Recorded, cuts: &[usize], long: bool, seed: u64) -> (Vec<Planned>, usize) {
    let marks = marks(rec);
    let mut seen: HashSet<(usize, usize, StateKey)> = HashSet::new();
    let (mut out, mut same) = (Vec::new(), 0);
    let mut durable = Durable::new(rec.base.clone());
    for &p in cuts {
        durable.advance(&rec.events, p);
        let pieces = durable.pieces(&rec.events);
        let (before, upto) = judged_as(&marks, p);
        let mut rng = StdRng::seed_from_u64(seed ^ (p as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        for mode in modes(&mut rng, &pieces, long) {
            let keep = mode.keep(&pieces);
            let key = durable.state(&rec.events, &pieces, &keep).key();
            if seen.insert((before, upto, key)) {
                out.push(Planned { p, mode, keep });
            } else {
                same += 1;
            }
        }
    }
    (out, same)
}

/// Every recorded mark's log position, sorted: where operations, syncs and
/// transactions began and ended.
fn marks(rec: &Recorded) -> Vec<usize> {
    let mut marks: Vec<usize> = rec.syncs.iter().flat_map(|s| [s.start.pos, s.end.pos]).collect();
    for t in &rec.threads {
        marks.extend(t.ops.iter().flat_map(|o| [o.start.pos, o.end.pos]));
    }
    if let Some(h) = &rec.txn {
        marks.extend(h.marks());
    }
    marks.sort_unstable();
    marks
}

/// The marks before cut `p` and those at or before it: two cuts with the
/// same pair are judged by the same rules.
fn judged_as(marks: &[usize], p: usize) -> (usize, usize) {
    (marks.partition_point(|m| *m < p), marks.partition_point(|m| *m <= p))
}

/// Checks the planned states `first`, `first + step`, ... (ascending cuts).
pub(crate) fn check_states(rec: &Recorded, states: &[Planned], first: usize, step: usize, long: bool) -> CutResult {
    let mut out = CutResult::default();
    let mut durable = Durable::new(rec.base.clone());
    for (i, st) in states.iter().enumerate().skip(first).step_by(step) {
        let Planned { p, mode, keep } = st;
        let p = *p;
        durable.advance(&rec.events, p);
        let pieces = durable.pieces(&rec.events);
        let devs = durable.state(&rec.events, &pieces, keep).devices();
        out.states += 1;
        // Some states also crash again while they recover.
        let again =
            ((i + 1) % if long { 4 } else { 16 } == 0).then(|| durable.whole_images(&rec.events, &pieces, keep));
        let mut r = check_state(rec, p, devs);
        if let (Ok(_), Some(images)) = (&r, again) {
            match recovery_crashes(rec, p, images, long) {
                Ok((n, same)) => {
                    out.recovery_states += n;
                    out.same += same;
                }
                Err(e) => r = Err(e),
            }
        }
        match r {
            Ok(newer) => out.newer += newer as usize,
            Err(detail) => out.violations.push(Violation {
                workload: rec.workload.clone(),
                seed: rec.seed,
                cut: p,
                cut_desc: describe_cut(&rec.events, p),
                mode: format!(
                    "{mode} (kept {} of {} unflushed block writes)",
                    keep.iter().filter(|k| **k).count(),
                    keep.len()
                ),
                detail,
            }),
        }
    }
    out
}

/// A second power cut while a crash state recovers: the recovery (open,
/// orphan frees, superblocks, fsck's commit) is recorded and cut after
/// every request, its unflushed writes dropped or kept. Each result must
/// still be a legal state for the first cut `p`. Returns the states checked
/// and those skipped as the same bytes as one checked (all share `p`).
/// A recovery of many requests (a store repair) is cut at 32 points spread
/// over it, the last included, except in long mode, which cuts after each.
fn recovery_crashes(rec: &Recorded, p: usize, images: Vec<Arc<Vec<u8>>>, long: bool) -> Result<(usize, usize), String> {
    let recorder = Arc::new(Recorder::default());
    let devs: Vec<Arc<dyn Device>> = images
        .iter()
        .enumerate()
        .map(|(i, img)| {
            Arc::new(RecordingDevice::new(i as u32, img.clone(), recorder.clone(), false)) as Arc<dyn Device>
        })
        .collect();
    {
        let fs =
            Fs::open(devs, Options { background_commit: false, inode_cache: super::INODE_CACHE, ..Options::default() })
                .map_err(|e| format!("recovery: open failed: {e}"))?;
        fsck::check(&fs, false, &mut |_, _, _| {}).map_err(|e| format!("recovery: fsck failed to run: {e}"))?;
    }
    let events = recorder.take();
    let mut durable = Durable::new(images);
    let (mut n, mut same) = (0, 0);
    let mut seen: HashSet<StateKey> = HashSet::new();
    let step = if long { 1 } else { events.len().div_ceil(32).max(1) };
    let cuts: Vec<usize> = (0..=events.len()).step_by(step).chain(std::iter::once(events.len())).collect();
    let mut last = None;
    for q in cuts {
        if last == Some(q) {
            continue;
        }
        last = Some(q);
        durable.advance(&events, q);
        let pieces = durable.pieces(&events);
        let mut modes = vec![Mode::Drop];
        if !pieces.is_empty() {
            modes.push(Mode::Keep);
        }
        for mode in modes {
            let keep = mode.keep(&pieces);
            let state = durable.state(&events, &pieces, &keep);
            if !seen.insert(state.key()) {
                same += 1;
                continue;
            }
            n += 1;
            check_state(rec, p, state.devices()).map_err(|e| {
                format!("crash during recovery, after {q} of its {} requests, {mode}: {e}", events.len())
            })?;
        }
    }
    Ok((n, same))
}

/// Thread `t`'s legal states at cut `p`: the lowest (what the last sync
/// completed before the cut guarantees) and every state a sync that had
/// started by then may have captured.
fn candidates(t: &ThreadHist, syncs: &[SyncRec], p: usize, background: bool) -> (usize, Vec<usize>) {
    // Operations ended before a sync started are in it; operations started
    // after it ended are not.
    let lo = |s: &SyncRec| t.ops.partition_point(|o| o.end.tick < s.start.tick);
    let hi = |s: &SyncRec| t.ops.partition_point(|o| o.start.tick < s.end.tick);
    let floor = syncs.iter().filter(|s| s.end.pos <= p).map(lo).max().unwrap_or(0);
    let mut c: BTreeSet<usize> = BTreeSet::new();
    for s in syncs.iter().filter(|s| s.end.pos <= p || s.start.pos < p) {
        for i in lo(s).max(floor)..=hi(s) {
            c.insert(i);
        }
    }
    c.insert(floor);
    if background {
        // A commit of its own may have captured any operation started by now.
        let started = t.ops.partition_point(|o| o.start.pos < p);
        c.extend(floor..=started);
    }
    (floor, c.into_iter().rev().collect())
}

/// Files whose data operations after state `i` may have changed by cut `p`.
fn touched(t: &ThreadHist, i: usize, p: usize) -> HashSet<u64> {
    t.ops.iter().skip(i).filter(|o| o.start.pos < p).flat_map(|o| o.mods.iter().copied()).collect()
}

/// Opens one crash state and checks it; Ok(true) when it showed a state
/// newer than the last completed sync.
fn check_state(rec: &Recorded, p: usize, devs: Vec<Arc<dyn Device>>) -> Result<bool, String> {
    let fs =
        Fs::open(devs, Options { background_commit: false, inode_cache: super::INODE_CACHE, ..Options::default() })
            .map_err(|e| format!("open failed: {e}"))?;
    let r = fs.report();
    if !r.double_claims.is_empty() {
        return Err(format!("blocks claimed twice: {:?}", r.double_claims));
    }
    let got = observe(&fs).map_err(|e| format!("reading the tree failed: {e}"))?;
    let f = fsck::check(&fs, false, &mut |_, _, _| {}).map_err(|e| format!("fsck failed to run: {e}"))?;
    if !f.is_clean() {
        return Err(format!("fsck: {}", f.remaining.join("; ")));
    }
    if let Some(h) = &rec.txn {
        return super::txn::check(h, p, &fs);
    }
    let mut newer = false;
    for t in &rec.threads {
        let sub = subtree(&got, &t.prefix);
        newer |= check_thread(t, &rec.syncs, p, &sub, rec.background)?;
    }
    // With per-thread directories, nothing may lie outside them.
    if rec.threads.iter().all(|t| !t.prefix.is_empty()) {
        for path in got.keys() {
            let inside = rec.threads.iter().any(|t| *path == t.prefix || path.starts_with(&format!("{}/", t.prefix)));
            if !inside {
                return Err(format!("unexpected {path} outside every thread's directory"));
            }
        }
    }
    Ok(newer)
}

fn check_thread(t: &ThreadHist, syncs: &[SyncRec], p: usize, got: &Tree, background: bool) -> Result<bool, String> {
    let (floor, cands) = candidates(t, syncs, p, background);
    let mut content_fail = None;
    for &i in &cands {
        let want = &t.states[i];
        if !same_meta(got, want) {
            continue;
        }
        let diffs = content_diffs(got, want, &touched(t, i, p));
        if diffs.is_empty() {
            return Ok(i > floor);
        }
        content_fail.get_or_insert((i, diffs));
    }
    let who = if t.prefix.is_empty() { String::new() } else { format!("{}: ", t.prefix) };
    if let Some((i, diffs)) = content_fail {
        return Err(format!(
            "{who}namespace is the state after operation {i}, but files not written since then differ: {}",
            diffs.iter().take(4).cloned().collect::<Vec<_>>().join("; ")
        ));
    }
    Err(format!(
        "{who}namespace matches no legal state (operations {floor}..={}); against the last synced state (after operation {floor}): {}",
        cands.first().copied().unwrap_or(floor),
        describe_diff(got, &t.states[floor])
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crashtest::{record_workload, CrashOptions};
    use std::collections::HashMap;

    /// The whole contents of crash devices.
    fn materialize(devs: &[Arc<dyn Device>]) -> Vec<Arc<Vec<u8>>> {
        devs.iter()
            .map(|d| {
                let mut img = vec![0u8; d.size() as usize];
                // A CrashDevice reads from memory: this cannot fail.
                let _ = d.read_at(&mut img, 0);
                Arc::new(img)
            })
            .collect()
    }

    /// States planned as the same (one key, at cuts judged alike) hold the
    /// same bytes on every device, by a hash of the whole images that has
    /// nothing to do with the key; and the plan does skip some. The whole
    /// images made for a crash during recovery are the state's bytes.
    #[test]
    fn states_with_one_key_hold_the_same_bytes() {
        let opts = CrashOptions::new("extent", 120, 5);
        let (rec, _) = record_workload(&opts).unwrap();
        let cuts = choose_cuts(&rec.events, opts.points, opts.seed);
        let (planned, same) = plan(&rec, &cuts, false, opts.seed);
        assert!(same > 0 && !planned.is_empty(), "{} planned, {same} skipped", planned.len());

        // The plan's own walk again, every state materialized and hashed.
        let marks = marks(&rec);
        let mut groups: HashMap<(usize, usize, StateKey), Vec<u32>> = HashMap::new();
        let mut durable = Durable::new(rec.base.clone());
        let mut walked = 0;
        for &p in &cuts {
            durable.advance(&rec.events, p);
            let pieces = durable.pieces(&rec.events);
            let class = judged_as(&marks, p);
            let mut rng = StdRng::seed_from_u64(opts.seed ^ (p as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            for mode in modes(&mut rng, &pieces, false) {
                let keep = mode.keep(&pieces);
                let state = durable.state(&rec.events, &pieces, &keep);
                let key = state.key();
                let devs = state.devices();
                let crc_of = |imgs: &[Arc<Vec<u8>>]| imgs.iter().fold(0u32, |c, img| crc32c::crc32c_append(c, img));
                let crc = crc_of(&materialize(&devs));
                // The images a crash during recovery starts from are these.
                assert_eq!(crc_of(&durable.whole_images(&rec.events, &pieces, &keep)), crc, "cut {p} {mode}");
                groups.entry((class.0, class.1, key)).or_default().push(crc);
                walked += 1;
            }
        }
        assert_eq!(walked, planned.len() + same);
        assert_eq!(groups.len(), planned.len());
        for (k, crcs) in &groups {
            assert!(crcs.iter().all(|c| *c == crcs[0]), "states of one key differ: {k:?} {crcs:x?}");
        }
    }

    /// A block rewritten with the bytes it already held changes nothing:
    /// its state is the state without that write.
    #[test]
    fn a_rewrite_of_the_same_bytes_is_the_same_state() {
        let base = vec![Arc::new(vec![7u8; 64 << 10])];
        let events = vec![
            Event::Write { dev: 0, off: 4096, data: vec![7u8; 4096] },
            Event::Write { dev: 0, off: 8192, data: vec![1u8; 4096] },
        ];
        let mut d = Durable::new(base);
        d.advance(&events, 2);
        let pieces = d.pieces(&events);
        let key = |keep: &[bool]| d.state(&events, &pieces, keep).key();
        assert_eq!(key(&[false, false]), key(&[true, false]));
        assert_eq!(key(&[false, true]), key(&[true, true]));
        assert_ne!(key(&[false, false]), key(&[false, true]));
    }
}
