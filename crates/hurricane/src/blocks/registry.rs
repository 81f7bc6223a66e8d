//! The table of block types: names, parameters, constructors. The layout
//! parser, the validator and the decoder all consult it, so a type exists
//! everywhere as soon as it is listed here.

use super::{Block, BuildArgs, Params};
use crate::error::{Error, Result};
use crate::layout::Value;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// Bytes; written with K, M, G suffixes.
    Size,
    /// A plain count.
    Int,
    /// One of a fixed set of words.
    Choice(&'static [&'static str]),
}

#[derive(Debug, Clone, Copy)]
pub struct ParamSpec {
    pub key: &'static str,
    pub kind: ParamKind,
    /// Default as written in a spec; None = required.
    pub default: Option<&'static str>,
    /// Inclusive bounds for Size and Int.
    pub min: u64,
    pub max: u64,
    pub doc: &'static str,
}

pub struct BlockType {
    pub name: &'static str,
    pub doc: &'static str,
    pub params: &'static [ParamSpec],
    /// Owns space on one device: takes `@dev`, has no children.
    pub per_device: bool,
    /// Bounds on the number of children for composites.
    pub min_children: usize,
    pub max_children: usize,
    /// Children must sit on pairwise distinct devices (stripe, regions, parity).
    pub distinct_devices: bool,
    /// Parameter that gives the number of children when none are written
    /// (`width` or `copies`), and the child type used to fill them.
    pub width_param: Option<&'static str>,
    pub build: fn(BuildArgs) -> Result<Arc<dyn Block>>,
}

impl std::fmt::Debug for BlockType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Every block type the engine knows.
pub static TYPES: &[&BlockType] =
    &[&super::extent::TYPE, &super::stripe::TYPE, &super::regions::TYPE, &super::replicate::TYPE, &super::inline::TYPE];

pub fn lookup(name: &str) -> Option<&'static BlockType> {
    TYPES.iter().copied().find(|t| t.name == name)
}

/// Parses a parameter value as written in a spec (`64K`, `3`, `zstd`).
pub fn parse_value(t: &BlockType, p: &ParamSpec, raw: &str) -> Result<Value> {
    match p.kind {
        ParamKind::Size | ParamKind::Int => {
            let n = if p.kind == ParamKind::Size { parse_size(raw) } else { raw.parse::<u64>().ok() };
            let n = n.ok_or_else(|| {
                Error::Layout(format!(
                    "{}: {}={raw:?} is not a {}",
                    t.name,
                    p.key,
                    if p.kind == ParamKind::Size { "size (e.g. 64K, 1M)" } else { "number" }
                ))
            })?;
            if n < p.min || n > p.max {
                return Err(Error::Layout(format!(
                    "{}: {}={raw} is out of range [{}, {}]",
                    t.name,
                    p.key,
                    show(p, p.min),
                    show(p, p.max)
                )));
            }
            Ok(Value::Num(n))
        }
        ParamKind::Choice(words) => {
            if words.contains(&raw) {
                Ok(Value::Word(raw.to_string()))
            } else {
                Err(Error::Layout(format!("{}: {}={raw:?} must be one of {}", t.name, p.key, words.join(", "))))
            }
        }
    }
}

/// `p`'s value written as a spec would write it.
pub fn show(p: &ParamSpec, n: u64) -> String {
    match p.kind {
        ParamKind::Size => format_size(n),
        _ => n.to_string(),
    }
}

pub fn parse_size(s: &str) -> Option<u64> {
    crate::units::parse_size(s).ok()
}

pub fn format_size(n: u64) -> String {
    crate::units::format_exact(n)
}

/// A node's full parameter set: the given values over the type's defaults.
/// Unknown keys are refused.
pub fn params_with_defaults(t: &BlockType, given: &[(String, Value)]) -> Result<Params> {
    let mut out = Params::default();
    for (k, v) in given {
        if !t.params.iter().any(|p| p.key == k) {
            return Err(Error::Layout(format!("{}: unknown parameter {k:?} (known: {})", t.name, known(t))));
        }
        out.0.insert(k.clone(), v.clone());
    }
    for p in t.params {
        if !out.0.contains_key(p.key) {
            match p.default {
                Some(d) => {
                    out.0.insert(p.key.to_string(), parse_value(t, p, d)?);
                }
                None if Some(p.key) == t.width_param => {}
                None => return Err(Error::Layout(format!("{}: missing required parameter {}", t.name, p.key))),
            }
        }
    }
    Ok(out)
}

pub fn known(t: &BlockType) -> String {
    if t.params.is_empty() {
        "none".into()
    } else {
        t.params.iter().map(|p| p.key).collect::<Vec<_>>().join(", ")
    }
}
