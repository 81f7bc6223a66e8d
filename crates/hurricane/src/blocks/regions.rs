//! `regions`: the file is cut into contiguous regions of `size` bytes, dealt
//! to the children in turn (HFS "distribution"). With regions as large as each
//! thread's share of the file, every thread of a partitioned computation works
//! on its own device. The arithmetic is the stripe's with one region per turn,
//! so the type shares its implementation.

use super::roundrobin::RoundRobin;
use super::{Block, BlockType, BuildArgs, ParamKind, ParamSpec, BLOCK_SIZE};
use crate::error::Result;
use std::sync::Arc;

pub static TYPE: BlockType = BlockType {
    name: "regions",
    doc: "Contiguous regions of `size` bytes, one per child in turn (HFS distribution): partitioned access stays on one device.",
    params: &[
        ParamSpec {
            key: "size",
            kind: ParamKind::Size,
            default: Some("16M"),
            min: BLOCK_SIZE as u64,
            max: 1 << 50,
            doc: "bytes in each region (a multiple of 4K)",
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
    RoundRobin::build(&TYPE, "size", a)
}
