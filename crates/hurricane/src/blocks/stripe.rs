//! `stripe`: round robin over the children by `unit` (RAID-0), so one large
//! request keeps every device busy. The geometry is [`RoundRobin`]'s, shared
//! with `regions`.

use super::roundrobin::RoundRobin;
use super::{Block, BlockType, BuildArgs, ParamKind, ParamSpec, BLOCK_SIZE};
use crate::error::Result;
use std::sync::Arc;

pub static TYPE: BlockType = BlockType {
    name: "stripe",
    doc: "Round robin over the children in units of `unit` bytes (RAID-0): large requests use every device at once.",
    params: &[
        ParamSpec {
            key: "unit",
            kind: ParamKind::Size,
            default: Some("1M"),
            min: BLOCK_SIZE as u64,
            max: 1 << 40,
            doc: "bytes stored on one child before moving to the next (a multiple of 4K)",
        },
        ParamSpec { key: "width", kind: ParamKind::Int, default: None, min: 1, max: 256, doc: "number of children" },
    ],
    per_device: false,
    min_children: 1,
    max_children: 256,
    distinct_devices: true,
    width_param: Some("width"),
    implied_width: None,
    state_version: None,
    in_metadata: false,
    build,
};

fn build(a: BuildArgs) -> Result<Arc<dyn Block>> {
    RoundRobin::build(&TYPE, "unit", a)
}
