//! Why a VRouterBinding reconcile failed; shared by the reconcile shell and
//! its writes, so neither imports the other.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("rollout: {0}")]
    Rollout(#[from] vrouter_rollout::RolloutError),
    #[error("{0}")]
    NotOurs(String),
}
