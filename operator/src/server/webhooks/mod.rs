//! Validating admission webhooks (spec §6): the object rules themselves are
//! `vrouter_api::validate`; `references` asks the API server about what an
//! object references, `review` answers an AdmissionReview with both (the
//! rules through `off_runtime`, on the blocking pool), and `server` serves
//! them over TLS.

pub mod off_runtime;
pub mod references;
pub mod review;
pub mod server;
pub mod target_cache;
