//! The table of block types: names, parameters, constructors. The layout
//! parser, the validator and the decoder all consult it, so a type exists
//! everywhere as soon as it is listed here.

use super::{Block, BuildArgs, Params, Spec, Value};
use crate::error::{Error, Result};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// Bytes; written with K, M, G suffixes.
    Size,
    /// A plain count.
    Int,
    /// One of a fixed set of words.
    Choice(&'static [&'static str]),
    /// A word in a syntax of the type's own (any characters a spec value
    /// may hold), checked by the type's constructor; `example` is one valid
    /// for any number of children.
    Text { syntax: &'static str, example: &'static str },
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

/// How a type's parameters fix its number of children ([`BlockType::implied_width`]).
pub type ImpliedWidth = fn(&[(String, Value)]) -> Option<u64>;

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
    /// For a type whose parameters fix its number of children (`parity`:
    /// data + parity): that number, so a spec written without children can
    /// be filled.
    pub implied_width: Option<ImpliedWidth>,
    /// Version of the type's persistent state and journal records (the first
    /// byte of each, written and checked by the framework); None for types
    /// that keep no state, whose nodes may have neither. A type bumps it when
    /// it changes either encoding, and then decodes (or refuses) older ones.
    pub state_version: Option<u8>,
    /// Keeps the file's data in the meta-data record itself, so a file that
    /// outgrows the node moves to the pool's default layout.
    pub in_metadata: bool,
    /// Makes a node from arguments the framework has already checked
    /// against this entry (and, for decoded nodes, state whose version it
    /// has checked).
    pub build: fn(BuildArgs) -> Result<Arc<dyn Block>>,
}

impl std::fmt::Debug for BlockType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Every block type the engine knows.
pub static TYPES: &[&BlockType] = &[
    &super::extent::TYPE,
    &super::stripe::TYPE,
    &super::regions::TYPE,
    &super::replicate::TYPE,
    &super::inline::TYPE,
    &super::checksum::TYPE,
    &super::parity::TYPE,
    &super::compress::TYPE,
    &super::table::TYPE,
    &super::write_mostly::TYPE,
    &super::log::TYPE,
    &super::colocate::TYPE,
];

/// The number of children a spec of type `t` written without any implies
/// through its parameters ([`BlockType::implied_width`]).
pub fn implied_width(t: &BlockType, params: &[(String, Value)]) -> Option<u64> {
    t.implied_width.and_then(|f| f(params))
}

pub fn lookup(name: &str) -> Option<&'static BlockType> {
    Registry::BUILTIN.lookup(name)
}

/// A set of block types layouts are built and decoded from: [`TYPES`] in the
/// engine, more in tests that add a type of their own.
#[derive(Clone, Copy)]
pub struct Registry<'r> {
    pub types: &'r [&'static BlockType],
}

impl Registry<'_> {
    pub const BUILTIN: Registry<'static> = Registry { types: TYPES };

    pub fn lookup(&self, name: &str) -> Option<&'static BlockType> {
        self.types.iter().copied().find(|t| t.name == name)
    }
}

/// The canonical form of a spec: parameters at their defaults and widths
/// restated by the child count dropped, the rest in the type's order.
pub fn canonical(mut s: Spec) -> Spec {
    s.children = s.children.into_iter().map(canonical).collect();
    if let Some(t) = lookup(&s.kind) {
        let n = s.children.len() as u64;
        s.params.retain(|(k, v)| {
            let Some(p) = t.params.iter().find(|p| p.key == k) else { return true };
            let default = p.default.and_then(|d| parse_value(t, p, d).ok());
            let restated = n > 0 && Some(p.key) == t.width_param && *v == Value::Num(n);
            default.as_ref() != Some(v) && !restated
        });
        s.params = ordered(Some(t), &s.params).into_iter().cloned().collect();
    }
    s
}

/// Parameters in the order the type lists them (unknown ones last).
pub fn ordered<'s>(t: Option<&BlockType>, params: &'s [(String, Value)]) -> Vec<&'s (String, Value)> {
    let mut out: Vec<_> = params.iter().collect();
    if let Some(t) = t {
        out.sort_by_key(|(k, _)| t.params.iter().position(|p| p.key == k).unwrap_or(usize::MAX));
    }
    out
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
        ParamKind::Text { .. } => Ok(Value::Word(raw.to_string())),
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

/// Every type of `types` with its shape and parameters (kind, default,
/// range, doc), as `hurricane layout types` and the CLI's help print it.
pub fn describe(types: &[&BlockType]) -> String {
    let mut out = String::new();
    for t in types {
        let shape = if t.per_device {
            "@DEV".to_string()
        } else if t.max_children == 0 {
            String::new()
        } else {
            format!("[{}..{} children]", t.min_children, t.max_children)
        };
        out.push_str(&format!("{}{shape}\n    {}\n", t.name, t.doc));
        for p in t.params {
            let (kind, range) = match p.kind {
                ParamKind::Size => ("SIZE".to_string(), format!("{}..{}, ", show(p, p.min), show(p, p.max))),
                ParamKind::Int => ("N".to_string(), format!("{}..{}, ", p.min, p.max)),
                ParamKind::Choice(words) => (words.join("|"), String::new()),
                ParamKind::Text { syntax, .. } => (syntax.to_string(), String::new()),
            };
            let default = match p.default {
                Some(d) => format!("default {d}"),
                None if Some(p.key) == t.width_param => "default: the number of children".to_string(),
                None => "required".to_string(),
            };
            out.push_str(&format!("    {}={kind} ({range}{default}): {}\n", p.key, p.doc));
        }
    }
    out
}

pub fn known(t: &BlockType) -> String {
    if t.params.is_empty() {
        "none".into()
    } else {
        t.params.iter().map(|p| p.key).collect::<Vec<_>>().join(", ")
    }
}
