//! Shared by the differential tests: the Go engine as the Go operator runs
//! it, and what a template renders on both sides.

#![allow(dead_code)]

pub mod differential;
pub mod go_oracle;
