//! Layout specs: the textual form of a composition (BRIEF "Layout spec"),
//! parsed into a [`Spec`] tree, resolved against a pool (devices chosen,
//! widths expanded), validated, and printed back canonically.
//!
//! ```text
//! block := name [ "(" param ("," param)* ")" ] [ "[" block ("," block)* "]" ] [ "@" device ]
//! param := key "=" value        (sizes take K, M, G suffixes)
//! ```

mod room;
mod spec;

pub use crate::blocks::{canonical, Spec, Value};
pub use room::{demand, room};
pub use spec::{parse, relocate, resolve, with_checksums, PoolInfo};
