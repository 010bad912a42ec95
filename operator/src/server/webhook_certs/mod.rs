//! The webhook serving certificate the operator makes and rotates itself
//! (the chart's default; cert-manager remains a choice). [`plan`] decides,
//! from what the Secret and the webhook configurations hold, what to make
//! and what to publish; [`material`] makes and stores the certificates;
//! [`shell`] reads and writes the Secret and the webhook configurations;
//! [`serving`] is the certificate each replica serves, swapped in place.

pub mod material;
pub mod plan;
pub mod serving;
pub mod shell;

pub use shell::{CertError, Settings, start};
