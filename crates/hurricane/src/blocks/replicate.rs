//! Placeholder until the type is written.
use super::{BlockType, BuildArgs, Block};
use crate::error::{Error, Result};
use std::sync::Arc;

pub static TYPE: BlockType = BlockType {
    name: "replicate",
    doc: "",
    params: &[],
    per_device: false,
    min_children: 0,
    max_children: 0,
    distinct_devices: false,
    width_param: None,
    build,
};

fn build(_a: BuildArgs) -> Result<Arc<dyn Block>> {
    Err(Error::Layout("not built".into()))
}
