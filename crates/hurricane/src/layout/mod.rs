//! Layout specs: the textual form of a composition (BRIEF "Layout spec"),
//! parsed into a [`Spec`] tree, resolved against a pool (devices chosen,
//! widths expanded), validated, and printed back canonically.
//!
//! ```text
//! block := name [ "(" param ("," param)* ")" ] [ "[" block ("," block)* "]" ] [ "@" device ]
//! param := key "=" value        (sizes take K, M, G suffixes)
//! ```

mod spec;

pub use spec::{canonical, parse, resolve, PoolInfo};

/// A parameter value: a number (sizes in bytes) or a word.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    Num(u64),
    Word(String),
}

/// One node of a layout as written: type, parameters, children, device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub kind: String,
    pub params: Vec<(String, Value)>,
    pub children: Vec<Spec>,
    pub device: Option<u32>,
}
