//! The webhook serving certificate the operator makes and rotates itself
//! (the chart's default; cert-manager remains a choice). [`plan`] decides,
//! from what the Secret and the webhook configurations hold, what to make
//! and what to publish; the imperative shell reads and writes them.

pub mod plan;
