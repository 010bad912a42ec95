//! VRouterConfigs whose VRouterStatus could not be created after their
//! apply. The create happens once, on the step to Applied; a config that is
//! Applied has nothing else that would bring it back to try again, so the
//! ones that failed are remembered here (in memory: the operator is one
//! leader process) until a retry succeeds.

use std::collections::HashSet;
use std::sync::Mutex;

use super::one_apply_per_router::Router;

#[derive(Debug, Default)]
pub struct StatusObjectsDue {
    configs: Mutex<HashSet<(Router, String)>>,
}

impl StatusObjectsDue {
    pub fn contains(&self, router: &Router, config: &str) -> bool {
        self.lock().contains(&(router.clone(), config.to_owned()))
    }

    pub fn insert(&self, router: &Router, config: &str) {
        self.lock().insert((router.clone(), config.to_owned()));
    }

    pub fn remove(&self, router: &Router, config: &str) {
        self.lock().remove(&(router.clone(), config.to_owned()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(Router, String)>> {
        self.configs.lock().unwrap_or_else(|e| e.into_inner())
    }
}
