//! Validating admission webhooks (spec §6). `rules` holds the checks that need
//! only the object; the server and the reference checks arrive with the
//! operator binary.

pub mod rules;
