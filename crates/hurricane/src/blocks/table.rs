//! `table`: an application-given mapping of file ranges to children (HFS
//! "application-specific distribution"): `table(map=0-8M:0;8M-:1)[A,B]` puts
//! bytes 0 to 8 MiB on child 0 and the rest on child 1. The ranges start at
//! 0, follow each other without gaps, end open (`START-` for the last),
//! fall on 4 KiB boundaries, and name every child at least once. A child
//! keeps its file blocks at the file's own block numbers (it holds only its
//! ranges, the rest are holes), so the mapping is arithmetic on the
//! parameter and the node keeps no state.

use super::common::{dispatch, group_pieces, span, Split};
use super::{Block, BlockType, BuildArgs, IoCtx, ParamKind, ParamSpec, Params, Value, BLOCK_SIZE};
use crate::error::{Error, Result};
use std::sync::Arc;

pub static TYPE: BlockType = BlockType {
    name: "table",
    doc: "File ranges mapped to children by the application (HFS application-specific distribution), e.g. map=0-8M:0;8M-:1.",
    params: &[ParamSpec {
        key: "map",
        kind: ParamKind::Text { syntax: "START-END:CHILD;...;START-:CHILD", example: "0-:0" },
        default: None,
        min: 0,
        max: 0,
        doc: "byte ranges from 0, without gaps, the last open-ended, each on a child (sizes as 64K, 8M, 1G); the CLI reads map=@FILE from a local file, one range a line",
    }],
    per_device: false,
    min_children: 1,
    max_children: 256,
    distinct_devices: false,
    width_param: None,
    implied_width: None,
    state_version: None,
    in_metadata: false,
    build,
};

/// Most ranges in one map.
const MAX_RANGES: usize = 1024;

/// Requests at least this long go to their children in parallel.
const PARALLEL_MIN_BLOCKS: u64 = 256; // 1 MiB

/// (first file block, end file block or u64::MAX, child) in file order.
type Range = (u64, u64, usize);

/// Parses and checks a map for `children` children.
fn parse_map(text: &str, children: usize) -> std::result::Result<Vec<Range>, String> {
    let bs = BLOCK_SIZE as u64;
    let size = |s: &str| -> std::result::Result<u64, String> {
        let n = crate::units::parse_size(s).map_err(|_| format!("{s:?} is not a size"))?;
        if !n.is_multiple_of(bs) {
            return Err(format!("{s} is not a multiple of 4K"));
        }
        Ok(n / bs)
    };
    let entries: Vec<&str> = text.split(';').collect();
    if entries.len() > MAX_RANGES {
        return Err(format!("more than {MAX_RANGES} ranges"));
    }
    let mut out: Vec<Range> = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let bad = |why: String| format!("range {} ({e:?}): {why}", i + 1);
        let (range, child) = e.split_once(':').ok_or_else(|| bad("expected START-END:CHILD".into()))?;
        let (start, end) = range.split_once('-').ok_or_else(|| bad("expected START-END".into()))?;
        let child: usize = child.parse().map_err(|_| bad(format!("{child:?} is not a child number")))?;
        if child >= children {
            return Err(bad(format!("child {child}, but the table has {children}")));
        }
        let start = size(start).map_err(bad)?;
        let want = out.last().map_or(0, |r| r.1);
        if start != want {
            return Err(bad(format!(
                "starts at {} bytes; the ranges must follow each other from 0 (expected {})",
                start * bs,
                want * bs
            )));
        }
        let last = i + 1 == entries.len();
        let end = match (end.is_empty(), last) {
            (true, true) => u64::MAX,
            (true, false) => return Err(bad("only the last range may be open-ended".into())),
            (false, true) => return Err(bad("the last range must be open-ended (START-:CHILD)".into())),
            (false, false) => size(end).map_err(bad)?,
        };
        if end <= start {
            return Err(bad("ends where it starts or before".into()));
        }
        out.push((start, end, child));
    }
    if let Some(c) = (0..children).find(|c| !out.iter().any(|r| r.2 == *c)) {
        return Err(format!("child {c} holds no range"));
    }
    Ok(out)
}

struct Table {
    id: u32,
    map: String,
    ranges: Vec<Range>,
    children: Vec<Arc<dyn Block>>,
}

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    let map = a.params.word("map")?.to_string();
    let ranges = parse_map(&map, a.children.len()).map_err(|e| Error::Layout(format!("table: map={map}: {e}")))?;
    Ok(Arc::new(Table { id: a.id, map, ranges, children: a.children }))
}

impl Table {
    /// The pieces of [fblk, fblk+n): (file block, child, length).
    fn pieces(&self, fblk: u64, n: u64) -> Vec<(u64, usize, u64)> {
        let end = fblk.saturating_add(n);
        let first = self.ranges.partition_point(|r| r.1 <= fblk);
        let mut out = Vec::new();
        for &(s, e, c) in &self.ranges[first..] {
            if s >= end {
                break;
            }
            let (a, b) = (s.max(fblk), e.min(end));
            out.push((a, c, b - a));
        }
        out
    }

    /// A request's pieces grouped by child: (child, [(child block, piece)]).
    fn split<S: Split>(&self, fblk: u64, n: u64, buf: S) -> Vec<(usize, Vec<(u64, S)>)> {
        let pieces: Vec<(u64, Option<usize>, u64)> =
            self.pieces(fblk, n).into_iter().map(|(f, c, len)| (f, Some(c), len)).collect();
        group_pieces(&pieces, self.children.len(), buf)
    }
}

impl Block for Table {
    fn parent_block(&self, child: usize, cblk: u64) -> Option<u64> {
        // A child keeps its blocks at the file's own numbers, inside its ranges.
        self.pieces(cblk, 1).first().filter(|p| p.1 == child).map(|_| cblk)
    }
    fn id(&self) -> u32 {
        self.id
    }
    fn kind(&self) -> &'static BlockType {
        &TYPE
    }
    fn params(&self) -> Params {
        let mut p = Params::default();
        p.0.insert("map".into(), Value::Word(self.map.clone()));
        p
    }
    fn children(&self) -> &[Arc<dyn Block>] {
        &self.children
    }

    fn read(&self, io: &IoCtx, fblk: u64, buf: &mut [u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        let groups = self.split(fblk, n, buf);
        dispatch(groups, n >= PARALLEL_MIN_BLOCKS, &|c, cb, piece: &mut [u8]| self.children[c].read(io, cb, piece))
    }

    fn write(&self, io: &IoCtx, fblk: u64, buf: &[u8]) -> Result<()> {
        let n = span(fblk, buf.len())?;
        let groups = self.split(fblk, n, buf);
        dispatch(groups, n >= PARALLEL_MIN_BLOCKS, &|c, cb, piece: &[u8]| self.children[c].write(io, cb, piece))
    }

    fn truncate(&self, io: &IoCtx, nblocks: u64) -> Result<()> {
        // Children keep the file's block numbers: each drops what lies past
        // the end (every child is truncated even if one fails).
        let mut res = Ok(());
        for child in &self.children {
            let r = child.truncate(io, nblocks);
            if res.is_ok() {
                res = r;
            }
        }
        res
    }

    fn map_range(&self, fblk: u64, n: u64, f: &mut dyn FnMut(u64, usize, u64, u64)) -> bool {
        for (b, c, len) in self.pieces(fblk, n) {
            f(b, c, b, len);
        }
        true
    }

    fn next_data(&self, fblk: u64) -> Option<u64> {
        // A child holds data only inside its own ranges.
        let first = self.ranges.partition_point(|r| r.1 <= fblk);
        self.ranges[first..].iter().find_map(|&(s, e, c)| {
            let from = s.max(fblk);
            self.children[c].next_data(from).filter(|&d| d < e)
        })
    }

    fn capacity(&self) -> u64 {
        // Past a child's capacity inside one of its ranges, nothing fits.
        self.ranges
            .iter()
            .filter_map(|&(s, e, c)| {
                let cap = self.children[c].capacity();
                (cap < e).then_some(cap.max(s))
            })
            .min()
            .unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testenv::{build, decode, encode, pattern, Env, BS};
    use super::super::{Layout, Spec, Value};
    use super::*;

    fn table(map: &str, kids: Vec<Spec>) -> Spec {
        Spec {
            kind: "table".into(),
            params: vec![("map".into(), Value::Word(map.into()))],
            children: kids,
            device: None,
        }
    }
    fn ext(d: u32) -> Spec {
        Spec { kind: "extent".into(), params: vec![], children: vec![], device: Some(d) }
    }

    #[test]
    fn ranges_go_to_their_children() {
        let env = Env::new(3, 1024);
        let l = build(&table("0-32K:0;32K-64K:1;64K-96K:0;96K-:2", vec![ext(0), ext(1), ext(2)]));
        let data = pattern(1, 40);
        env.write(&l, 0, &data).unwrap();
        assert_eq!(env.read(&l, 0, 40), data);
        assert_eq!(env.read(&l, 5, 20), data[5 * BS..25 * BS]);
        // Blocks per device: 0-7 and 16-23 on device 0, 8-15 on 1, 24-39 on 2.
        let mut per = [0u64; 3];
        l.extents(&mut |d, _, n| per[d as usize] += n);
        assert_eq!(per, [16, 8, 16]);
        assert_eq!(l.root().next_data(0), Some(0));
        env.truncate(&l, 10);
        assert_eq!(l.root().next_data(10), None);
        let mut per = [0u64; 3];
        l.extents(&mut |d, _, n| per[d as usize] += n);
        assert_eq!(per, [8, 2, 0]);
        // Holes between stored data.
        env.write(&l, 30, &data[..BS]).unwrap();
        assert_eq!(l.root().next_data(11), Some(30));
        env.check_accounting(&[&l]);
    }

    #[test]
    fn bad_maps_are_refused_clearly() {
        let two = || vec![ext(0), ext(1)];
        for (map, want) in [
            ("8M-:0", "must follow each other from 0"),
            ("0-8M:0;9M-:1", "expected 8388608"),
            ("0-8M:0;8M-16M:1", "must be open-ended"),
            ("0-:0;8M-:1", "only the last range"),
            ("0-8M:0;8M-:2", "child 2, but the table has 2"),
            ("0-8M:0;8M-:0", "child 1 holds no range"),
            ("0-5000:0;5000-:1", "not a multiple of 4K"),
            ("0-8M:0;8M-8M:1;8M-:0", "ends where it starts"),
            ("0-8X:0;8X-:1", "not a size"),
            ("0-8M;8M-:1", "START-END:CHILD"),
            ("0:0", "START-END"),
        ] {
            match Layout::build(&table(map, two())) {
                Err(Error::Layout(m)) => assert!(m.contains(want), "{map}: {m}"),
                Err(e) => panic!("{map}: {e}"),
                Ok(_) => panic!("{map} accepted"),
            }
        }
    }

    #[test]
    fn a_table_prints_and_decodes_back() {
        let stripe = Spec { kind: "stripe".into(), params: vec![], children: vec![ext(1), ext(2)], device: None };
        let l = build(&table("0-8M:1;8M-1G:0;1G-:1", vec![ext(0), stripe]));
        assert_eq!(l.spec().to_string(), "table(map=0-8M:1;8M-1G:0;1G-:1)[extent@0,stripe[extent@1,extent@2]]");
        let bytes = encode(&l);
        assert_eq!(encode(&decode(&bytes).unwrap()), bytes);
    }
}
