//! One guest per test binary, lent to one test at a time.
//!
//! A guest takes 4–10 s to boot under TCG, so tests that can share one do:
//! the first lease boots it, later leases wait for the previous test to
//! finish. A test that panicked still returns the guest (each test resets
//! the state it relies on at the start of its lease). The guest dies with
//! the test process (see [`crate::process`]).

use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::VmError;

pub struct SharedGuest<G: 'static> {
    boot: fn() -> Result<G, VmError>,
    guest: OnceLock<Result<Arc<G>, String>>,
    turn: Mutex<()>,
}

impl<G: Send + Sync + 'static> SharedGuest<G> {
    pub const fn new(boot: fn() -> Result<G, VmError>) -> Self {
        SharedGuest {
            boot,
            guest: OnceLock::new(),
            turn: Mutex::new(()),
        }
    }

    /// Waits for the guest to be free (booting it the first time) and lends
    /// it until the lease is dropped. Panics, with the reason, when it could
    /// not boot.
    pub fn lease(&'static self) -> Lease<G> {
        let turn = self.turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let guest = self
            .guest
            .get_or_init(|| (self.boot)().map(Arc::new).map_err(|e| e.to_string()))
            .clone()
            .unwrap_or_else(|e| panic!("the shared test guest could not boot: {e}"));
        Lease { _turn: turn, guest }
    }
}

/// A guest lent to one test.
pub struct Lease<G: 'static> {
    _turn: MutexGuard<'static, ()>,
    guest: Arc<G>,
}

impl<G> Deref for Lease<G> {
    type Target = G;
    fn deref(&self) -> &G {
        &self.guest
    }
}
