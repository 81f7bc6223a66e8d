//! Parser, printer, canonicaliser and resolver for layout specs.
//!
//! Everything is driven by the block registry, so a new block type is
//! parsed, printed and resolved as soon as it is listed there. Specs may come
//! from untrusted users (xattrs), so every input yields a [`Spec`] or an
//! `Error::Layout` naming the column; nothing here panics or recurses
//! without bound.

use super::{Spec, Value};
use crate::blocks::registry::{self, canonical, ordered, BlockType, ParamSpec};
use crate::blocks::{lookup, MAX_DEPTH, MAX_FANOUT, MAX_NODES, TYPES};
use crate::error::{Error, Result};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Longest spec text accepted (a maximal tree of short names fits easily).
pub const MAX_SPEC_LEN: usize = 64 * 1024;

/// Type that fills composites given only a width (`stripe(width=4)`).
const FILL_CHILD: &str = "extent";

/// What the resolver knows about the pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolInfo {
    pub devices: u32,
    /// Free blocks per device; devices past the end count as full.
    pub free_blocks: Vec<u64>,
    /// Devices that take no new data (being evacuated, or removed), sorted:
    /// never picked, and refused when a layout names them.
    pub retired: Vec<(u32, &'static str)>,
    /// The device a node of unnamed device gets first while it has room
    /// and no sibling took it: the one a new small file's directory chose
    /// (`colocate`), so that a directory's files share groups.
    pub prefer: Option<u32>,
}

impl PoolInfo {
    /// A pool with one device per entry of `free_blocks`.
    pub fn new(free_blocks: Vec<u64>) -> Self {
        PoolInfo {
            devices: u32::try_from(free_blocks.len()).unwrap_or(u32::MAX),
            free_blocks,
            retired: Vec::new(),
            prefer: None,
        }
    }
    fn free(&self, dev: u32) -> u64 {
        self.free_blocks.get(dev as usize).copied().unwrap_or(0)
    }
    /// Devices that take new data: a spread-out composite written without a
    /// width spans them all.
    pub fn usable(&self) -> u32 {
        self.devices.saturating_sub(self.retired.iter().filter(|r| r.0 < self.devices).count() as u32)
    }
    /// Why device `dev` takes no new data ("removed", "evacuating"), if it does not.
    pub fn retired(&self, dev: u32) -> Option<&'static str> {
        self.retired.binary_search_by_key(&dev, |r| r.0).ok().map(|i| self.retired[i].1)
    }
}

// ---------------------------------------------------------------- parsing

/// Parses spec text into a tree, checking types, parameters and structure.
pub fn parse(s: &str) -> Result<Spec> {
    if s.len() > MAX_SPEC_LEN {
        return Err(Error::Layout(format!("spec is {} bytes long; the limit is {MAX_SPEC_LEN}", s.len())));
    }
    let mut p = Parser { src: s, pos: 0, nodes: 0 };
    let spec = p.block(0)?;
    p.ws();
    if p.pos < s.len() {
        return Err(p.err(p.pos, "unexpected text after the layout"));
    }
    Ok(spec)
}

struct Parser<'a> {
    src: &'a str,
    /// Byte offset; always on a char boundary.
    pos: usize,
    nodes: usize,
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn is_value(c: char) -> bool {
    !c.is_whitespace() && !"()[],@=".contains(c)
}

impl<'a> Parser<'a> {
    fn err(&self, at: usize, msg: impl fmt::Display) -> Error {
        let rest = self.src.get(at..).unwrap_or("");
        let near = if rest.is_empty() {
            "at end of input".to_string()
        } else {
            let mut ex: String = rest.chars().take(24).collect();
            if ex.len() < rest.len() {
                ex.push_str("...");
            }
            format!("near {ex:?}")
        };
        Error::Layout(format!("at column {}: {msg}; {near}", at + 1))
    }

    fn peek(&self) -> Option<char> {
        self.src.get(self.pos..).and_then(|r| r.chars().next())
    }

    fn ws(&mut self) {
        self.take_while(char::is_whitespace);
    }

    fn take_while(&mut self, f: impl Fn(char) -> bool) -> &'a str {
        let start = self.pos;
        while let Some(c) = self.peek().filter(|&c| f(c)) {
            self.pos += c.len_utf8();
        }
        self.src.get(start..self.pos).unwrap_or("")
    }

    /// Skips whitespace, then consumes `c` if it is next; returns its offset.
    fn eat(&mut self, c: char) -> Option<usize> {
        self.ws();
        let at = self.pos;
        (self.peek() == Some(c)).then(|| {
            self.pos += c.len_utf8();
            at
        })
    }

    fn block(&mut self, depth: usize) -> Result<Spec> {
        self.ws();
        let at = self.pos;
        let name = self.take_while(is_ident);
        if name.is_empty() {
            return Err(self.err(at, "expected a block type name"));
        }
        let t = lookup(name)
            .ok_or_else(|| self.err(at, format!("unknown block type {name:?} (known: {})", type_names())))?;
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(self.err(at, format!("more than {MAX_NODES} blocks in one layout")));
        }
        let mut spec = Spec { kind: name.to_string(), params: Vec::new(), children: Vec::new(), device: None };
        if let Some(open) = self.eat('(') {
            loop {
                self.ws();
                let kat = self.pos;
                let key = self.take_while(is_ident);
                let p =
                    match t.params.iter().find(|p| p.key == key) {
                        Some(p) => p,
                        None if key.is_empty() => {
                            return Err(self
                                .err(kat, format!("expected a parameter of {name} (known: {})", registry::known(t))))
                        }
                        None => {
                            return Err(self
                                .err(kat, format!("{name} has no parameter {key:?} (known: {})", registry::known(t))))
                        }
                    };
                if spec.params.iter().any(|(k, _)| k == key) {
                    return Err(self.err(kat, format!("parameter {key} of {name} given twice")));
                }
                if self.eat('=').is_none() {
                    return Err(self.err(self.pos, format!("expected \"=\" after {key}")));
                }
                self.ws();
                let vat = self.pos;
                let raw = self.take_while(is_value);
                if raw.is_empty() {
                    return Err(self.err(vat, format!("expected a value for {key}")));
                }
                let v = registry::parse_value(t, p, raw).map_err(|e| self.err(vat, message(e)))?;
                spec.params.push((key.to_string(), v));
                if self.eat(')').is_some() {
                    break;
                }
                if self.eat(',').is_none() {
                    let msg =
                        format!("expected \",\" or \")\" in the parameters of {name} opened at column {}", open + 1);
                    return Err(self.err(self.pos, msg));
                }
            }
        }
        if let Some(open) = self.eat('[') {
            if t.per_device || t.max_children == 0 {
                return Err(self.err(open, no_children(t)));
            }
            // Checked before recursing, so nesting cannot exhaust the stack.
            if depth >= MAX_DEPTH {
                return Err(self.err(open, format!("layout nested deeper than {MAX_DEPTH} levels")));
            }
            loop {
                let cat = self.pos;
                spec.children.push(self.block(depth + 1)?);
                if spec.children.len() > MAX_FANOUT {
                    return Err(self.err(cat, format!("{name} has more than {MAX_FANOUT} children")));
                }
                if self.eat(']').is_some() {
                    break;
                }
                if self.eat(',').is_none() {
                    let msg = format!("expected \",\" or \"]\" after a child of {name} opened at column {}", open + 1);
                    return Err(self.err(self.pos, msg));
                }
            }
        }
        if let Some(amp) = self.eat('@') {
            if !t.per_device {
                return Err(self.err(amp, no_device(t)));
            }
            self.ws();
            let dat = self.pos;
            let digits = self.take_while(|c| c.is_ascii_digit());
            let dev = digits.parse::<u32>().map_err(|_| {
                self.err(
                    dat,
                    if digits.is_empty() { "expected a device number after \"@\"" } else { "device number too large" },
                )
            })?;
            spec.device = Some(dev);
        }
        check_node(t, &spec).map_err(|m| self.err(at, m))?;
        Ok(spec)
    }
}

fn type_names() -> String {
    TYPES.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
}

fn message(e: Error) -> String {
    match e {
        Error::Layout(m) => m,
        e => e.to_string(),
    }
}

fn no_children(t: &BlockType) -> String {
    if t.per_device {
        format!("{} takes no children: it stores data on one device", t.name)
    } else {
        format!("{} takes no children", t.name)
    }
}

fn no_device(t: &BlockType) -> String {
    if t.max_children > 0 {
        format!("{} is a composite and takes no @device; put @device on its children", t.name)
    } else {
        format!("{} takes no @device", t.name)
    }
}

fn param<'t>(t: &'t BlockType, key: &str) -> Option<&'t ParamSpec> {
    t.params.iter().find(|p| p.key == key)
}

/// The width (`width`/`copies`) written on a node, if any.
fn width_of(t: &BlockType, s: &Spec) -> Option<u64> {
    let wp = t.width_param?;
    s.params.iter().find_map(|(k, v)| match v {
        Value::Num(n) if k == wp => Some(*n),
        _ => None,
    })
}

/// Structural rules for one node; shared by the parser and the resolver (which
/// may be handed trees built in code).
fn check_node(t: &BlockType, s: &Spec) -> Result<(), String> {
    let n = s.children.len();
    if n > 0 && (t.per_device || t.max_children == 0) {
        return Err(no_children(t));
    }
    if s.device.is_some() && !t.per_device {
        return Err(no_device(t));
    }
    for (i, (k, v)) in s.params.iter().enumerate() {
        let p =
            param(t, k).ok_or_else(|| format!("{} has no parameter {k:?} (known: {})", t.name, registry::known(t)))?;
        if s.params[..i].iter().any(|(k2, _)| k2 == k) {
            return Err(format!("parameter {k} of {} given twice", t.name));
        }
        // Re-parse the printed value: checks kind and range in one place.
        let text = value_text(Some(p), v);
        if registry::parse_value(t, p, &text).map_err(message)? != *v {
            return Err(format!("{}: {k}={text} is the wrong kind of value", t.name));
        }
    }
    registry::params_with_defaults(t, &s.params).map_err(message)?;
    let max = t.max_children.min(MAX_FANOUT);
    let bounds = |got: u64, what: String| match got < t.min_children as u64 || got > max as u64 {
        true => Err(format!("{} takes {}..{max} children, {what}", t.name, t.min_children)),
        false => Ok(()),
    };
    if n > 0 {
        bounds(n as u64, format!("got {n}"))?;
    }
    if let (Some(w), Some(wp)) = (width_of(t, s), t.width_param) {
        if n > 0 && w != n as u64 {
            return Err(format!("{}({wp}={w}) has {n} children; they must match", t.name));
        }
        if n == 0 {
            bounds(w, format!("got {wp}={w}"))?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- printing

fn value_text(p: Option<&ParamSpec>, v: &Value) -> String {
    match (p, v) {
        (Some(p), Value::Num(n)) => registry::show(p, *n),
        (None, Value::Num(n)) => n.to_string(),
        (_, Value::Word(w)) => w.clone(),
    }
}

/// Canonical text: `name(k=v,...)[child,...]@dev`, no spaces.
impl fmt::Display for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = lookup(&self.kind);
        f.write_str(&self.kind)?;
        let params = ordered(t, &self.params);
        for (i, (k, v)) in params.iter().enumerate() {
            let p = t.and_then(|t| param(t, k));
            write!(f, "{}{k}={}", if i == 0 { "(" } else { "," }, value_text(p, v))?;
        }
        if !params.is_empty() {
            f.write_str(")")?;
        }
        for (i, c) in self.children.iter().enumerate() {
            write!(f, "{}{c}", if i == 0 { "[" } else { "," })?;
        }
        if !self.children.is_empty() {
            f.write_str("]")?;
        }
        if let Some(d) = self.device {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- resolving

/// Makes a spec explicit for `Layout::build`: widths become children,
/// per-device leaves get devices, and the result is validated against the
/// pool and printed canonically. Idempotent.
pub fn resolve(spec: &Spec, pool: &PoolInfo) -> Result<Spec> {
    let mut nodes = 0;
    let mut s = expand(spec, pool, 0, &mut nodes)?;
    // Devices written explicitly count as used so the allocator spreads away from them.
    let mut uses = BTreeMap::new();
    count_devices(&s, &mut uses);
    if s.device.is_none() && is_per_device(&s) {
        s.device = Some(pick(pool, &BTreeSet::new(), &uses).ok_or_else(|| no_room(&s.kind, None, pool))?);
    }
    assign(&mut s, pool, &mut uses)?;
    check_devices(&s, pool)?;
    Ok(canonical(s))
}

/// The same layout with every per-device leaf on device `from` moved to
/// another device, picked as [`resolve`] picks (free space first, then the
/// device this layout uses least, then the most free) among those no
/// sibling's subtree uses (so copies and stripe units stay apart). A child
/// of a stripe-like parent (distinct devices, a `width`, no width implied by
/// its parameters) that has nowhere to go is dropped instead, narrowing the
/// parent, as long as it keeps its fewest children: the file's data is
/// copied into the new tree whole. For emptying a device (`device remove`).
/// Fails, naming the leaf, when a redundancy group would have to lose a
/// member.
pub fn relocate(spec: &Spec, from: u32, pool: &PoolInfo) -> Result<Spec> {
    let mut pool = pool.clone();
    if pool.retired(from).is_none() {
        pool.retired.push((from, "being emptied"));
        pool.retired.sort_unstable();
    }
    let mut s = spec.clone();
    let mut uses = BTreeMap::new();
    count_devices(&s, &mut uses);
    uses.remove(&from);
    relocate_in(&mut s, from, &pool, &BTreeSet::new(), &mut uses)?;
    check_devices(&s, &pool)?;
    Ok(canonical(s))
}

fn relocate_in(
    s: &mut Spec,
    from: u32,
    pool: &PoolInfo,
    taken: &BTreeSet<u32>,
    uses: &mut BTreeMap<u32, usize>,
) -> Result<()> {
    if is_per_device(s) {
        if s.device == Some(from) {
            let d = pick(pool, taken, uses).ok_or_else(|| {
                Error::Layout(format!(
                    "no device to move {}@{from} to: every other device of the pool holds a sibling's data \
                     or takes no new data",
                    s.kind
                ))
            })?;
            s.device = Some(d);
            *uses.entry(d).or_default() += 1;
        }
        return Ok(());
    }
    let t = lookup(&s.kind);
    let narrows = t.is_some_and(|t| t.distinct_devices && t.implied_width.is_none() && t.width_param == Some("width"));
    let min = t.map_or(1, |t| t.min_children.max(1));
    let mut i = 0;
    while i < s.children.len() {
        let mut avoid = taken.clone();
        for (j, c) in s.children.iter().enumerate() {
            if j != i {
                let mut u = BTreeMap::new();
                count_devices(c, &mut u);
                avoid.extend(u.into_keys());
            }
        }
        let mut child = s.children[i].clone();
        let mut trial = uses.clone();
        match relocate_in(&mut child, from, pool, &avoid, &mut trial) {
            Ok(()) => {
                s.children[i] = child;
                *uses = trial;
                i += 1;
            }
            Err(_) if narrows && s.children.len() > min => {
                s.children.remove(i);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn is_per_device(s: &Spec) -> bool {
    lookup(&s.kind).is_some_and(|t| t.per_device)
}

fn expand(s: &Spec, pool: &PoolInfo, depth: usize, nodes: &mut usize) -> Result<Spec> {
    if depth > MAX_DEPTH {
        return Err(Error::Layout(format!("layout nested deeper than {MAX_DEPTH} levels")));
    }
    let t = lookup(&s.kind)
        .ok_or_else(|| Error::Layout(format!("unknown block type {:?} (known: {})", s.kind, type_names())))?;
    *nodes += 1;
    if *nodes > MAX_NODES {
        return Err(Error::Layout(format!("more than {MAX_NODES} blocks in one layout")));
    }
    check_node(t, s).map_err(Error::Layout)?;
    let mut out = Spec { kind: s.kind.clone(), params: s.params.clone(), children: Vec::new(), device: s.device };
    let mut label = t.name.to_string();
    let fill;
    let children = if s.children.is_empty() && !t.per_device && t.max_children > 0 {
        // Spread-out composites default to the whole pool; replicas to two.
        let n = match width_of(t, s).or_else(|| registry::implied_width(t, &s.params)) {
            Some(w) => w,
            None if t.distinct_devices => pool.usable().into(),
            None if t.width_param.is_some() => 2,
            None => t.min_children as u64,
        };
        let wp = t.width_param.unwrap_or("width");
        label = format!("{}({wp}={n})", t.name);
        if t.distinct_devices && n > pool.devices.into() {
            return Err(Error::Layout(format!("{label} needs {n} distinct devices, pool has {}", pool.devices)));
        }
        let max = t.max_children.min(MAX_FANOUT) as u64;
        if n < t.min_children as u64 || n > max {
            return Err(Error::Layout(format!("{label}: {} takes {}..{max} children", t.name, t.min_children)));
        }
        let child = Spec { kind: FILL_CHILD.into(), params: Vec::new(), children: Vec::new(), device: None };
        fill = vec![child; n as usize];
        &fill
    } else {
        &s.children
    };
    for c in children {
        out.children.push(expand(c, pool, depth + 1, nodes)?);
    }
    if t.distinct_devices {
        let per_dev = out.children.iter().filter(|c| is_per_device(c)).count();
        if per_dev as u64 > pool.devices.into() {
            return Err(Error::Layout(format!("{label} needs {per_dev} distinct devices, pool has {}", pool.devices)));
        }
    }
    // The children now say the width; keeping it would only restate them.
    if !out.children.is_empty() {
        if let Some(wp) = t.width_param {
            out.params.retain(|(k, _)| k != wp);
        }
    }
    Ok(out)
}

fn count_devices(s: &Spec, uses: &mut BTreeMap<u32, usize>) {
    if let Some(d) = s.device {
        *uses.entry(d).or_default() += 1;
    }
    for c in &s.children {
        count_devices(c, uses);
    }
}

/// Gives every device-less per-device leaf a device, in preorder.
fn assign(s: &mut Spec, pool: &PoolInfo, uses: &mut BTreeMap<u32, usize>) -> Result<()> {
    let distinct = lookup(&s.kind).is_some_and(|t| t.distinct_devices);
    // Under a distinct parent, siblings' devices (written or picked) are off limits.
    let mut taken: BTreeSet<u32> = if distinct {
        s.children.iter().filter(|c| is_per_device(c)).filter_map(|c| c.device).collect()
    } else {
        BTreeSet::new()
    };
    for c in &mut s.children {
        if is_per_device(c) && c.device.is_none() {
            let d = pick(pool, &taken, uses).ok_or_else(|| no_room(&c.kind, Some(&s.kind), pool))?;
            c.device = Some(d);
            *uses.entry(d).or_default() += 1;
            if distinct {
                taken.insert(d);
            }
        } else {
            assign(c, pool, uses)?;
        }
    }
    Ok(())
}

/// Allocator policy: a device not taken by distinct siblings, preferring one
/// with free space, then one this layout uses least (so replicas and stripe
/// units land apart), then the most free blocks, then the lowest index.
fn pick(pool: &PoolInfo, taken: &BTreeSet<u32>, uses: &BTreeMap<u32, usize>) -> Option<u32> {
    // Past the listed devices all look alike (full, unused), so one more than
    // the devices already used or taken suffices to find the best.
    if let Some(d) = pool.prefer {
        if d < pool.devices
            && !taken.contains(&d)
            && !uses.contains_key(&d)
            && pool.retired(d).is_none()
            && pool.free(d) > 0
        {
            return Some(d);
        }
    }
    let scan = (pool.free_blocks.len() + uses.len() + taken.len() + 1).min(pool.devices as usize) as u32;
    (0..scan).filter(|d| !taken.contains(d) && pool.retired(*d).is_none()).min_by_key(|&d| {
        let free = pool.free(d);
        (free == 0, uses.get(&d).copied().unwrap_or(0), Reverse(free), d)
    })
}

fn no_room(kind: &str, parent: Option<&str>, pool: &PoolInfo) -> Error {
    match parent {
        Some(p) => Error::Layout(format!(
            "no device left for a {kind} under {p}: its siblings already use all {} pool devices",
            pool.devices
        )),
        None => Error::Layout(format!("no device for {kind}: the pool has no devices")),
    }
}

fn check_devices(s: &Spec, pool: &PoolInfo) -> Result<()> {
    if let Some(d) = s.device {
        if d >= pool.devices {
            let range = match pool.devices {
                0 => "no devices".to_string(),
                n => format!("{n} devices: 0..{}", n - 1),
            };
            return Err(Error::Layout(format!("{}@{d}: device {d} does not exist (pool has {range})", s.kind)));
        }
        if let Some(why) = pool.retired(d) {
            return Err(Error::Layout(format!("{}@{d}: device {d} is {why}: it takes no new data", s.kind)));
        }
    }
    if lookup(&s.kind).is_some_and(|t| t.distinct_devices) {
        let mut seen = BTreeMap::new();
        // A child that only wraps one leaf (`checksum[extent@1]`) is on that leaf's device.
        for (i, c) in s.children.iter().enumerate() {
            let Some(d) = leaf_device(c) else { continue };
            if let Some(j) = seen.insert(d, i) {
                return Err(Error::Layout(format!(
                    "{}: children {j} and {i} are both on device {d}; a {}'s children must be on distinct devices",
                    s.kind, s.kind
                )));
            }
        }
    }
    s.children.iter().try_for_each(|c| check_devices(c, pool))
}

/// Name of the block type the pool's checksum option puts into new layouts.
const CHECKSUM: &str = "checksum";

/// The pool's checksum option applied to a resolved spec: a `checksum` node
/// directly above every per-device leaf, so a redundant parent can tell
/// which copy is bad. Unchanged when the tree already has a `checksum` node
/// or keeps its data in the meta-data (`inline`). A tree that would outgrow
/// the node or depth limits gets one `checksum` at the root instead, and one
/// already at the depth limit stays as it is.
pub fn with_checksums(spec: Spec) -> Spec {
    fn has(s: &Spec, f: &dyn Fn(&Spec) -> bool) -> bool {
        f(s) || s.children.iter().any(|c| has(c, f))
    }
    fn size(s: &Spec, depth: usize, nodes: &mut usize, deepest: &mut usize) {
        *nodes += 1;
        *deepest = (*deepest).max(depth);
        for c in &s.children {
            size(c, depth + 1, nodes, deepest);
        }
    }
    fn wrap(s: Spec) -> Spec {
        if is_per_device(&s) {
            return Spec { kind: CHECKSUM.into(), params: Vec::new(), children: vec![s], device: None };
        }
        Spec { children: s.children.into_iter().map(wrap).collect(), ..s }
    }
    let in_metadata = |s: &Spec| lookup(&s.kind).is_some_and(|t| t.in_metadata);
    if has(&spec, &|s| s.kind == CHECKSUM) || has(&spec, &in_metadata) {
        return spec;
    }
    let (mut nodes, mut deepest) = (0, 0);
    size(&spec, 0, &mut nodes, &mut deepest);
    let mut leaves = 0;
    count_leaves(&spec, &mut leaves);
    if nodes + leaves <= MAX_NODES && deepest < MAX_DEPTH {
        return wrap(spec);
    }
    if nodes < MAX_NODES && deepest < MAX_DEPTH {
        return Spec { kind: CHECKSUM.into(), params: Vec::new(), children: vec![spec], device: None };
    }
    spec
}

/// The device of a per-device leaf, or of the one leaf under a chain of
/// single-child nodes above it.
fn leaf_device(s: &Spec) -> Option<u32> {
    let mut cur = s;
    for _ in 0..=MAX_DEPTH {
        if is_per_device(cur) {
            return cur.device;
        }
        match cur.children.as_slice() {
            [only] => cur = only,
            _ => return None,
        }
    }
    None
}

fn count_leaves(s: &Spec, n: &mut usize) {
    if is_per_device(s) {
        *n += 1;
    }
    for c in &s.children {
        count_leaves(c, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use proptest::sample::{select, Index};

    fn err(s: &str) -> String {
        match parse(s) {
            Ok(spec) => panic!("{s:?} parsed as {spec}"),
            Err(e) => e.to_string(),
        }
    }

    fn pool(n: usize) -> PoolInfo {
        PoolInfo::new(vec![1000; n])
    }

    fn resolve_err(s: &str, n: usize) -> String {
        match parse(s).and_then(|x| resolve(&x, &pool(n))) {
            Ok(spec) => panic!("{s:?} resolved as {spec}"),
            Err(e) => e.to_string(),
        }
    }

    fn round(s: &str) -> String {
        let spec = parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"));
        let c = canonical(spec);
        assert_eq!(parse(&c.to_string()).ok(), Some(c.clone()), "{s:?}");
        c.to_string()
    }

    #[test]
    fn checksums_go_above_every_leaf_once() {
        let p = pool(4);
        let with = |s: &str| with_checksums(resolve(&parse(s).unwrap(), &p).unwrap()).to_string();
        assert_eq!(with("replicate[extent@1,extent@2]"), "replicate[checksum[extent@1],checksum[extent@2]]");
        assert_eq!(with("extent@0"), "checksum[extent@0]");
        assert_eq!(
            with("stripe(unit=64K)[extent@0,replicate[extent@1,extent@2]]"),
            "stripe(unit=64K)[checksum[extent@0],replicate[checksum[extent@1],checksum[extent@2]]]"
        );
        // Already checksummed somewhere, or data kept in the meta-data: as given.
        assert_eq!(with("checksum[stripe[extent@0,extent@1]]"), "checksum[stripe[extent@0,extent@1]]");
        assert_eq!(with("replicate[checksum[extent@0],extent@1]"), "replicate[checksum[extent@0],extent@1]");
        assert_eq!(with("inline"), "inline");
        // The result resolves to itself and builds.
        let s = with_checksums(resolve(&parse("stripe(width=3)").unwrap(), &p).unwrap());
        assert_eq!(resolve(&s, &p).unwrap(), s);
        crate::blocks::Layout::build(&s).unwrap();
        // Too many leaves to wrap each: one checksum at the root.
        let wide = format!("regions[{}]", vec!["stripe(width=4)"; 200].join(","));
        let s = with_checksums(resolve(&parse(&wide).unwrap(), &p).unwrap());
        assert_eq!(s.kind, "checksum");
        crate::blocks::Layout::build(&s).unwrap();
        // Wrapped leaves still count for a distinct-device parent.
        let dup = parse("stripe[checksum[extent@1],checksum[extent@1]]").unwrap();
        assert!(resolve(&dup, &p).unwrap_err().to_string().contains("both on device 1"));
        // Already at the depth limit: unchanged.
        let mut deep = "extent".to_string();
        for _ in 0..MAX_DEPTH {
            deep = format!("replicate[{deep}]");
        }
        let s = resolve(&parse(&deep).unwrap(), &p).unwrap();
        assert_eq!(with_checksums(s.clone()), s);
    }

    #[test]
    fn brief_examples() {
        assert_eq!(
            parse("extent@3").unwrap(),
            Spec { kind: "extent".into(), params: vec![], children: vec![], device: Some(3) }
        );
        assert_eq!(round("extent@3"), "extent@3");
        let s = parse("stripe(unit=64K)[extent@0,extent@1,extent@2]").unwrap();
        assert_eq!(s.params, vec![("unit".to_string(), Value::Num(64 << 10))]);
        assert_eq!(s.children.len(), 3);
        assert_eq!(s.to_string(), "stripe(unit=64K)[extent@0,extent@1,extent@2]");
        assert_eq!(round("stripe(width=7,unit=64K)"), "stripe(unit=64K,width=7)");
        assert_eq!(round("regions(size=16M,width=7)"), "regions(width=7)");
        let r = "replicate(copies=2,read=least-loaded)[stripe(width=3),stripe(width=3)]";
        assert_eq!(parse(r).unwrap().to_string(), r);
        assert_eq!(round(r), "replicate[stripe(width=3),stripe(width=3)]");
        assert_eq!(round("inline"), "inline");
        assert_eq!(round(" stripe ( unit = 1M , width = 2 ) \n"), "stripe(width=2)");
        assert_eq!(
            round("replicate(read=primary)[extent@1 , extent @ 2]"),
            "replicate(read=primary)[extent@1,extent@2]"
        );
        assert_eq!(round("inline(max=4096)"), "inline(max=4K)");
    }

    #[test]
    fn parse_errors() {
        let cases = [
            ("stripe(unit=64K)[strpe@1]", "at column 18: unknown block type \"strpe\" (known: extent, stripe"),
            ("stripe(unti=64K)", "at column 8: stripe has no parameter \"unti\" (known: unit, width)"),
            ("stripe(unit=64Q)", "at column 13: stripe: unit=\"64Q\" is not a size"),
            ("stripe(unit=99999999999999999999G)", "is not a size"),
            ("stripe(unit=4K,unit=8K)", "at column 16: parameter unit of stripe given twice"),
            ("replicate(read=fastest)", "must be one of least-loaded, nearest, primary"),
            (
                "stripe[extent@0,extent@1",
                "at column 25: expected \",\" or \"]\" after a child of stripe opened at column 7; at end of input",
            ),
            ("stripe(unit=64K", "expected \",\" or \")\""),
            ("extent@3 foo", "at column 10: unexpected text after the layout; near \"foo\""),
            ("stripe[extent,extent]@2", "at column 22: stripe is a composite and takes no @device"),
            ("inline@1", "inline takes no @device"),
            ("extent[extent]", "at column 7: extent takes no children"),
            ("stripe(width=3)[extent@0,extent@1]", "at column 1: stripe(width=3) has 2 children; they must match"),
            ("extent@", "expected a device number"),
            ("extent@99999999999", "device number too large"),
            ("", "at column 1: expected a block type name; at end of input"),
            ("stripe()", "expected a parameter of stripe"),
            ("stripe(unit=)", "expected a value for unit"),
            ("stripe[]", "expected a block type name"),
            ("étoile", "at column 1: expected a block type name; near \"étoile\""),
            ("extent@1\u{0}", "unexpected text"),
        ];
        for (spec, want) in cases {
            let got = err(spec);
            assert!(got.contains(want), "{spec:?}: got {got:?}, want {want:?}");
        }
        let deep = format!("{}extent{}", "replicate[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(err(&deep).contains("nested deeper than 16 levels"));
        let ok = format!("{}extent{}", "replicate[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(parse(&ok).is_ok());
        // Far past the depth limit and the length limit: refused, no stack overflow.
        assert!(err(&"replicate[".repeat(6000)).contains("nested deeper"));
        assert!(err(&"[".repeat(1 << 20)).contains("the limit is"));
        let wide = format!("replicate[{}]", vec!["inline"; MAX_FANOUT + 1].join(","));
        assert!(err(&wide).contains("children"));
    }

    #[test]
    fn resolve_fills_and_allocates() {
        let p = PoolInfo::new(vec![10, 50, 40, 50]);
        let s = resolve(&parse("stripe(unit=64K,width=3)").unwrap(), &p).unwrap();
        assert_eq!(s.to_string(), "stripe(unit=64K)[extent@1,extent@3,extent@2]");
        assert_eq!(resolve(&s, &p).unwrap(), s);
        // Default width is the whole pool; the written device is avoided.
        let s = resolve(&parse("regions[extent,extent@1,extent,extent]").unwrap(), &p).unwrap();
        assert_eq!(s.to_string(), "regions[extent@3,extent@1,extent@2,extent@0]");
        assert_eq!(resolve(&parse("regions").unwrap(), &p).unwrap().children.len(), 4);
        let s = resolve(&parse("replicate(copies=2,read=least-loaded)[stripe(width=2),stripe(width=2)]").unwrap(), &p)
            .unwrap();
        assert_eq!(s.to_string(), "replicate[stripe[extent@1,extent@3],stripe[extent@2,extent@0]]");
        assert_eq!(resolve(&parse("replicate").unwrap(), &p).unwrap().to_string(), "replicate[extent@1,extent@3]");
        assert_eq!(resolve(&parse("extent").unwrap(), &p).unwrap().to_string(), "extent@1");
        assert_eq!(resolve(&parse("inline").unwrap(), &p).unwrap().to_string(), "inline");
    }

    #[test]
    fn relocate_moves_leaves_off_a_device_keeping_groups_distinct() {
        let p = pool(5);
        let r = |s: &str, from| relocate(&parse(s).unwrap(), from, &p).map(|x| x.to_string());
        // A replica moves to a device its group does not use.
        assert_eq!(
            r("replicate[checksum[extent@1],checksum[extent@2]]", 2).unwrap(),
            "replicate[checksum[extent@1],checksum[extent@0]]"
        );
        // Every leaf on the device moves; others stay put.
        let got = r("stripe(unit=64K)[extent@3,extent@1,extent@3]", 3).unwrap();
        assert!(!got.contains("@3"), "{got}");
        assert!(got.contains("extent@1"), "{got}");
        // A group that already spans every other device has nowhere to go.
        let err = r("parity(data=3,parity=2)[extent@0,extent@1,extent@2,extent@3,extent@4]", 4).unwrap_err();
        assert!(err.to_string().contains("no device to move extent@4"), "{err}");
        let err = r("replicate[extent@0,extent@1,extent@2,extent@3,extent@4]", 1).unwrap_err();
        assert!(err.to_string().contains("no device to move extent@1"), "{err}");
        // A stripe as wide as the rest of the pool narrows instead.
        assert_eq!(
            r("stripe[checksum[extent@0],checksum[extent@1],checksum[extent@2],checksum[extent@3],checksum[extent@4]]", 3).unwrap(),
            "stripe[checksum[extent@0],checksum[extent@1],checksum[extent@2],checksum[extent@4]]"
        );
        // A retired device is never chosen.
        let mut q = pool(3);
        q.retired = vec![(0, "removed")];
        let got = relocate(&parse("replicate[extent@1,extent@2]").unwrap(), 2, &q).unwrap_err();
        assert!(got.to_string().contains("no device"), "{got}");
    }

    #[test]
    fn resolve_errors() {
        let e = resolve_err("extent@9", 4);
        assert!(e.contains("extent@9: device 9 does not exist (pool has 4 devices: 0..3)"), "{e}");
        let e = resolve_err("stripe[extent@0,extent@1,extent@1]", 4);
        assert!(e.contains("both on device 1"), "{e}");
        let e = resolve_err("stripe(unit=64K,width=7)", 4);
        assert!(e.contains("stripe(width=7) needs 7 distinct devices, pool has 4"), "{e}");
        let e = resolve_err("regions(size=16M,width=7)", 4);
        assert!(e.contains("regions(width=7) needs 7 distinct devices, pool has 4"), "{e}");
        let e = resolve_err("stripe[extent,extent,extent]", 2);
        assert!(e.contains("needs 3 distinct devices, pool has 2"), "{e}");
        let e = resolve_err("extent", 0);
        assert!(e.contains("no devices"), "{e}");
        let big = format!("regions[{}]", vec!["replicate(copies=8)"; 130].join(","));
        assert!(resolve_err(&big, 8).contains("more than 1024 blocks"));
        // Trees built in code get the same checks as parsed ones.
        let bad = Spec {
            kind: "extent".into(),
            params: vec![("max".into(), Value::Word("x".into()))],
            children: vec![],
            device: None,
        };
        assert!(resolve(&bad, &pool(4)).is_err());
        let bad = Spec { kind: "nope".into(), params: vec![], children: vec![], device: None };
        assert!(resolve(&bad, &pool(4)).unwrap_err().to_string().contains("unknown block type"));
        // A huge claimed pool is scanned only as far as needed.
        let huge = PoolInfo { devices: u32::MAX, free_blocks: vec![], retired: vec![], prefer: None };
        assert_eq!(
            resolve(&parse("stripe(width=3)").unwrap(), &huge).unwrap().to_string(),
            "stripe[extent@0,extent@1,extent@2]"
        );
    }

    // ------------------------------------------------------------ properties

    fn value(t: &'static BlockType, p: &'static ParamSpec) -> BoxedStrategy<Value> {
        use registry::ParamKind::*;
        let (lo, hi) = if Some(p.key) == t.width_param {
            // Widths must also fit the child bounds; small keeps trees small.
            (p.min.max(t.min_children as u64), p.max.min(t.max_children as u64).min(10))
        } else {
            (p.min, p.max)
        };
        match p.kind {
            Choice(words) => select(words.to_vec()).prop_map(|w| Value::Word(w.into())).boxed(),
            Text { example, .. } => Just(Value::Word(example.into())).boxed(),
            Int => (lo..=hi.min(lo.saturating_add(20))).prop_map(Value::Num).boxed(),
            Size => prop_oneof![
                (lo..=hi).prop_map(Value::Num),
                (0u32..4, 1u64..1024).prop_map(move |(s, k)| Value::Num((k << (10 * s)).clamp(lo, hi))),
            ]
            .boxed(),
        }
    }

    fn params(t: &'static BlockType) -> BoxedStrategy<Vec<(String, Value)>> {
        let each: Vec<_> = t
            .params
            .iter()
            .map(|p| {
                let kv = value(t, p).prop_map(move |v| (p.key.to_string(), v));
                if p.default.is_some() || Some(p.key) == t.width_param {
                    proptest::option::of(kv).boxed()
                } else {
                    kv.prop_map(Some).boxed()
                }
            })
            .collect();
        each.prop_map(|v| v.into_iter().flatten().collect::<Vec<_>>()).prop_shuffle().boxed()
    }

    /// Random valid trees over whatever the registry lists.
    fn spec_tree() -> BoxedStrategy<Spec> {
        let leaf = select(TYPES.to_vec())
            .prop_flat_map(|t| {
                let dev = if t.per_device { proptest::option::of(0u32..10).boxed() } else { Just(None).boxed() };
                (params(t), dev).prop_map(move |(params, device)| Spec {
                    kind: t.name.into(),
                    params,
                    children: vec![],
                    device,
                })
            })
            .boxed();
        let composites: Vec<&'static BlockType> =
            TYPES.iter().copied().filter(|t| !t.per_device && t.max_children > 0).collect();
        if composites.is_empty() {
            return leaf;
        }
        leaf.prop_recursive(4, 48, 4, move |inner| {
            select(composites.clone()).prop_flat_map(move |t| {
                let lo = t.min_children.max(1);
                let hi = t.max_children.min(4).max(lo);
                (params(t), proptest::collection::vec(inner.clone(), lo..=hi)).prop_map(
                    move |(mut params, children)| {
                        // A written width must match the children, or go.
                        let n = children.len() as u64;
                        let fits =
                            t.width_param.and_then(|wp| param(t, wp)).is_some_and(|p| (p.min..=p.max).contains(&n));
                        params.retain(|(k, _)| Some(k.as_str()) != t.width_param || fits);
                        for (k, v) in &mut params {
                            if Some(k.as_str()) == t.width_param {
                                *v = Value::Num(n);
                            }
                        }
                        Spec { kind: t.name.into(), params, children, device: None }
                    },
                )
            })
        })
        .boxed()
    }

    fn check_resolved(s: &Spec, devs: u32) {
        let t = lookup(&s.kind).expect("known type");
        if t.per_device {
            assert!(s.device.is_some_and(|d| d < devs), "{s}");
        }
        if t.distinct_devices {
            let mut seen = BTreeSet::new();
            for c in s.children.iter().filter(|c| is_per_device(c)) {
                assert!(seen.insert(c.device), "{s}");
            }
        }
        if !t.per_device && t.min_children > 0 {
            assert!(!s.children.is_empty(), "{s}");
        }
        s.children.iter().for_each(|c| check_resolved(c, devs));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn canonical_round_trips(s in spec_tree()) {
            // Printing puts params in schema order; otherwise the tree survives.
            let text = s.to_string();
            let back = parse(&text).map(canonical).ok();
            prop_assert_eq!(back, Some(canonical(s.clone())), "{}", text);
            let c = canonical(s);
            prop_assert_eq!(parse(&c.to_string()).ok(), Some(c.clone()));
            prop_assert_eq!(canonical(c.clone()), c);
        }

        #[test]
        fn arbitrary_text_never_panics(s in any::<String>(), t in "[a-z(),@=\\[\\] 0-9KMG-]{0,80}") {
            let _ = parse(&s);
            let _ = parse(&t);
        }

        #[test]
        fn mutated_specs_never_panic(s in spec_tree(), edits in proptest::collection::vec((any::<Index>(), any::<char>(), 0u8..3), 1..4)) {
            let mut chars: Vec<char> = s.to_string().chars().collect();
            for (at, c, op) in edits {
                let i = at.index(chars.len() + 1);
                match op {
                    0 => chars.insert(i, c),
                    1 if i < chars.len() => { chars.remove(i); }
                    _ if i < chars.len() => chars[i] = c,
                    _ => {}
                }
            }
            let text: String = chars.into_iter().collect();
            if let Ok(p) = parse(&text) {
                let c = canonical(p);
                prop_assert_eq!(parse(&c.to_string()).ok(), Some(c));
            }
        }

        #[test]
        fn resolve_is_valid_and_idempotent(s in spec_tree(), free in proptest::collection::vec(0u64..1000, 8)) {
            let pool = PoolInfo::new(free);
            if let Ok(r) = resolve(&s, &pool) {
                check_resolved(&r, 8);
                prop_assert_eq!(resolve(&r, &pool).ok(), Some(r.clone()));
                prop_assert_eq!(parse(&r.to_string()).ok(), Some(r.clone()));
            }
        }
    }
}
