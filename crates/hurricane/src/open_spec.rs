//! The textual open spec: which application-layer building blocks an open
//! instance is made of. A value type of its own, below both `fs` (which
//! checks it when `user.hurricane.open` is set) and `open` (which builds
//! instances from it).
//!
//! ```text
//! spec     := [ item ("," item)* ]
//! item     := "cursor=" ("shared" | "per-thread")
//!           | "prefetch=" ( "none" | "next" | "adaptive"
//!                         | "distance(" "d=" N [",a=" N] [",per=" ("file"|"thread")] ")" )
//!           | "locks=" ("none" | "auto")
//!           | "cache=" ("page" | "none")
//! ```
//!
//! Missing items take their defaults (`cursor=shared,prefetch=adaptive,
//! locks=none,cache=page`). `Display` prints the canonical form with every item, which
//! parses back to the same spec.

use crate::error::{Error, Result};
use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

/// Largest prefetch distance and amount, in blocks.
pub const MAX_DISTANCE: u32 = 4096;
pub const MAX_AMOUNT: u32 = 1024;

/// Where the file offset of `read`/`write`/`seek` lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CursorKind {
    /// One offset for the instance; a read and its offset update are one
    /// atomic step (as POSIX does for a shared file descriptor).
    #[default]
    Shared,
    /// One offset for each thread using the instance (HFS: a per-thread
    /// building block keeps each thread's offset).
    PerThread,
}

/// Whose accesses a distance policy follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scope {
    /// One window for all threads: the file is read as one stream.
    #[default]
    File,
    /// One window for each thread.
    Thread,
}

/// Prefetch policy (HFS 5.4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Prefetch {
    None,
    /// On a read of block b, request block b+1 (per thread).
    NextBlock,
    /// Keep every block up to `d` blocks past the last one read requested,
    /// in requests of `a` blocks.
    Distance {
        d: u32,
        a: u32,
        scope: Scope,
    },
    /// Detect each thread's pattern and choose the policy and distance.
    #[default]
    Adaptive,
}

/// Advisory range locks taken by the instance itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LockPolicy {
    /// Only the locks the program takes.
    #[default]
    None,
    /// Every read holds a shared lock, and every write an exclusive lock, on
    /// its byte range for its duration: multi-block requests of the threads
    /// sharing the instance do not interleave.
    Auto,
}

/// Whether the kernel's page cache stands between programs and an instance
/// opened through the mount. The native API has no page cache: there the
/// choice has no effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageCache {
    /// Reads fill the kernel's page cache (with its readahead) and are
    /// served from it again; writes pass through it to the engine.
    #[default]
    Page,
    /// Every read and write of the instance reaches the engine as the
    /// program made it (as with `O_DIRECT`, without its alignment rules),
    /// several in flight for a large one, and the instance's prefetch
    /// policy does the reading ahead. For streams larger than memory, or
    /// from devices across a network, where filling and evicting the page
    /// cache costs more than the data is reused.
    None,
}

/// An open composition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpenSpec {
    pub cursor: CursorKind,
    pub prefetch: Prefetch,
    pub locks: LockPolicy,
    pub cache: PageCache,
}

impl OpenSpec {
    /// The default of a file opened through the mount, where the kernel's
    /// readahead and page cache do the prefetching: no engine prefetch.
    pub fn mounted() -> OpenSpec {
        OpenSpec { prefetch: Prefetch::None, ..OpenSpec::default() }
    }

    pub fn parse(text: &str) -> Result<OpenSpec> {
        let bad = |msg: String| Error::Invalid(format!("open spec {:?}: {msg}", text.trim()));
        let mut spec = OpenSpec::default();
        let mut seen: Vec<&str> = Vec::new();
        for item in split_top(text).map_err(&bad)? {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            let (k, v) = item.split_once('=').ok_or_else(|| bad(format!("{item:?} is not key=value")))?;
            let (k, v) = (k.trim(), v.trim());
            if seen.contains(&k) {
                return Err(bad(format!("{k} given twice")));
            }
            match k {
                "cursor" => {
                    spec.cursor = match v {
                        "shared" => CursorKind::Shared,
                        "per-thread" | "per_thread" | "thread" => CursorKind::PerThread,
                        _ => return Err(bad(format!("cursor={v}: expected shared or per-thread"))),
                    }
                }
                "prefetch" => spec.prefetch = parse_prefetch(v).map_err(&bad)?,
                "locks" | "lock" => {
                    spec.locks = match v {
                        "none" => LockPolicy::None,
                        "auto" => LockPolicy::Auto,
                        _ => return Err(bad(format!("locks={v}: expected none or auto"))),
                    }
                }
                "cache" => {
                    spec.cache = match v {
                        "page" => PageCache::Page,
                        "none" => PageCache::None,
                        _ => return Err(bad(format!("cache={v}: expected page or none"))),
                    }
                }
                _ => return Err(bad(format!("unknown key {k:?} (known: cursor, prefetch, locks, cache)"))),
            }
            seen.push(k);
        }
        Ok(spec)
    }
}

/// Splits at commas outside parentheses.
fn split_top(s: &str) -> std::result::Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced ')'".into());
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    out.push(&s[start..]);
    Ok(out)
}

fn parse_prefetch(v: &str) -> std::result::Result<Prefetch, String> {
    let (name, args) = match v.find('(') {
        Some(i) => {
            let inner = v[i + 1..].strip_suffix(')').ok_or_else(|| format!("prefetch={v}: text after ')'"))?;
            (v[..i].trim(), Some(inner))
        }
        None => (v, None),
    };
    match (name, args) {
        ("none", None) => Ok(Prefetch::None),
        ("next" | "next-block" | "next_block", None) => Ok(Prefetch::NextBlock),
        ("adaptive", None) => Ok(Prefetch::Adaptive),
        ("distance", Some(args)) => {
            let (mut d, mut a, mut scope) = (None, None, Scope::File);
            for kv in args.split(',') {
                let kv = kv.trim();
                if kv.is_empty() {
                    continue;
                }
                let (k, x) = kv.split_once('=').ok_or_else(|| format!("distance: {kv:?} is not key=value"))?;
                let (k, x) = (k.trim(), x.trim());
                let num = |max: u32| -> std::result::Result<u32, String> {
                    match x.parse::<u32>() {
                        Ok(n) if (1..=max).contains(&n) => Ok(n),
                        _ => Err(format!("distance: {k}={x} must be a whole number in [1, {max}]")),
                    }
                };
                match k {
                    "d" | "distance" if d.is_none() => d = Some(num(MAX_DISTANCE)?),
                    "a" | "amount" if a.is_none() => a = Some(num(MAX_AMOUNT)?),
                    "per" | "scope" => {
                        scope = match x {
                            "file" => Scope::File,
                            "thread" => Scope::Thread,
                            _ => return Err(format!("distance: per={x}: expected file or thread")),
                        }
                    }
                    "d" | "distance" | "a" | "amount" => return Err(format!("distance: {k} given twice")),
                    _ => return Err(format!("distance: unknown parameter {k:?} (known: d, a, per)")),
                }
            }
            let d = d.ok_or("distance needs d=N (blocks ahead)")?;
            Ok(Prefetch::Distance { d, a: a.unwrap_or(1), scope })
        }
        ("distance", None) => Err("distance needs parameters: distance(d=N,a=N)".into()),
        (n, Some(_)) if matches!(n, "none" | "next" | "next-block" | "adaptive") => {
            Err(format!("prefetch={n} takes no parameters"))
        }
        _ => Err(format!("prefetch={v}: expected none, next, distance(d=N,a=N) or adaptive")),
    }
}

impl FromStr for OpenSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        OpenSpec::parse(s)
    }
}

impl fmt::Display for CursorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CursorKind::Shared => "shared",
            CursorKind::PerThread => "per-thread",
        })
    }
}

impl fmt::Display for Prefetch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prefetch::None => f.write_str("none"),
            Prefetch::NextBlock => f.write_str("next"),
            Prefetch::Adaptive => f.write_str("adaptive"),
            Prefetch::Distance { d, a, scope: Scope::File } => write!(f, "distance(d={d},a={a})"),
            Prefetch::Distance { d, a, scope: Scope::Thread } => write!(f, "distance(d={d},a={a},per=thread)"),
        }
    }
}

impl fmt::Display for LockPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockPolicy::None => "none",
            LockPolicy::Auto => "auto",
        })
    }
}

impl fmt::Display for PageCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PageCache::Page => "page",
            PageCache::None => "none",
        })
    }
}

impl fmt::Display for OpenSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cursor={},prefetch={},locks={},cache={}", self.cursor, self.prefetch, self.locks, self.cache)
    }
}

/// Checks a value for `user.hurricane.open` and returns its canonical form;
/// other attributes pass unchanged. Called from `setxattr`.
pub fn check_xattr<'a>(name: &[u8], value: &'a [u8]) -> Result<Cow<'a, [u8]>> {
    if name != crate::xattr::OPEN.as_bytes() {
        return Ok(Cow::Borrowed(value));
    }
    let text = std::str::from_utf8(value)
        .map_err(|_| Error::Invalid(format!("{}: value is not UTF-8", crate::xattr::OPEN)))?;
    let spec = OpenSpec::parse(text.trim_end_matches(['\n', '\0']))?;
    Ok(Cow::Owned(spec.to_string().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_canonically() {
        let s = OpenSpec::parse("cursor=per-thread,prefetch=distance(d=30,a=5)").unwrap();
        assert_eq!(s.cursor, CursorKind::PerThread);
        assert_eq!(s.prefetch, Prefetch::Distance { d: 30, a: 5, scope: Scope::File });
        assert_eq!(s.to_string(), "cursor=per-thread,prefetch=distance(d=30,a=5),locks=none,cache=page");
        assert_eq!(OpenSpec::parse(&s.to_string()).unwrap(), s);
        assert_eq!(OpenSpec::parse("").unwrap(), OpenSpec::default());
        assert_eq!(OpenSpec::parse(" prefetch = adaptive ").unwrap().prefetch, Prefetch::Adaptive);
        assert_eq!(OpenSpec::parse("prefetch=next,locks=auto").unwrap().locks, LockPolicy::Auto);
        let t = OpenSpec::parse("prefetch=distance(d=4,per=thread)").unwrap();
        assert_eq!(t.prefetch, Prefetch::Distance { d: 4, a: 1, scope: Scope::Thread });
        assert_eq!(OpenSpec::parse(&t.to_string()).unwrap(), t);
        let c = OpenSpec::parse("cache=none").unwrap();
        assert_eq!(c, OpenSpec { cache: PageCache::None, ..Default::default() });
        assert_eq!(OpenSpec::parse(&c.to_string()).unwrap(), c);
        for p in [Prefetch::None, Prefetch::NextBlock, Prefetch::Adaptive] {
            let s = OpenSpec { prefetch: p, ..Default::default() };
            assert_eq!(OpenSpec::parse(&s.to_string()).unwrap(), s);
        }
    }

    #[test]
    fn refuses_bad_specs_clearly() {
        for (bad, says) in [
            ("cursor=both", "expected shared or per-thread"),
            ("prefetch=distance(d=0)", "d=0 must be"),
            ("prefetch=distance(d=5000)", "must be a whole number in [1, 4096]"),
            ("prefetch=distance(a=5)", "needs d=N"),
            ("prefetch=distance", "needs parameters"),
            ("prefetch=distance(d=3,x=1)", "unknown parameter"),
            ("prefetch=distance(d=3", "unbalanced"),
            ("prefetch=sometimes", "expected none, next"),
            ("prefetch=none(3)", "takes no parameters"),
            ("colour=red", "unknown key"),
            ("cursor", "not key=value"),
            ("cursor=shared,cursor=shared", "given twice"),
            ("locks=maybe", "expected none or auto"),
            ("cache=sometimes", "expected page or none"),
            ("cache=none,cache=page", "given twice"),
        ] {
            let e = OpenSpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says) && e.contains("open spec"), "{bad}: {e}");
        }
    }
}
