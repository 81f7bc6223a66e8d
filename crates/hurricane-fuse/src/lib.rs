//! FUSE front end (to be written).
