//! Validating admission webhooks (spec §6): `rules` checks an object on its
//! own, `references` asks the API server about what it references, `review`
//! answers an AdmissionReview, `server` serves them over TLS.

pub mod references;
pub mod review;
pub mod rules;
pub mod server;
