//! The VRouterConfig controller: applies one router's config and reports the
//! result (spec §7.2). `decide` holds every decision; the reconciler that
//! performs the I/O around it arrives with the providers.

pub mod decide;
