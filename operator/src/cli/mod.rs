//! The command line: the operator's flags ([`args`]) and the offline commands
//! `render`, `convert`, `diff`, `resume`, `history` and `rollback`.

pub mod args;
pub mod convert;
pub mod diff;
pub mod go_flags;
pub mod history;
pub mod manifest_files;
pub mod render;
pub mod resume;
pub mod webhook_cert_args;

pub use args::*;
