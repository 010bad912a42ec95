//! The VyOS config.boot parsers, from the crate (one home for the grammar the
//! render check and these tests read configs with).

pub use vrouter_render::testing::config_boot::*;
