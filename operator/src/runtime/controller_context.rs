//! The context one controller's reconciles read: the shared [`Context`]
//! and the part only that controller has. One generic type, so no
//! controller writes its own wrapper, and the shared context holds nothing
//! of any one controller's.

use std::ops::Deref;
use std::sync::Arc;

use crate::runtime::context::Context;

/// The shared [`Context`] (reached through `Deref`, as `ctx.client`) and
/// `own`, what only one controller has: its stores as its own watches fill
/// them, the versions its own writes produced, its caches.
pub struct Ctx<C> {
    pub shared: Arc<Context>,
    pub own: C,
}

impl<C> Ctx<C> {
    pub fn new(shared: Arc<Context>, own: C) -> Self {
        Ctx { shared, own }
    }
}

impl<C> Deref for Ctx<C> {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.shared
    }
}

impl<C> AsRef<Context> for Ctx<C> {
    fn as_ref(&self) -> &Context {
        &self.shared
    }
}
