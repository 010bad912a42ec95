//! The vrouter operator: controllers and admission webhooks wired around the
//! `vrouter-*` libraries. Decisions live in pure `decide` modules; the
//! reconcilers around them only read, call and write.

pub mod conditions;
pub mod proxmoxcluster;
pub mod vrouterbinding;
pub mod vrouterconfig;
pub mod webhooks;
