//! The transport seam: one command in, one reply out.
//!
//! Every path to a guest agent the operator uses is request/response: a
//! unix socket (tests, a host-side QEMU chardev), `virsh qemu-agent-command`
//! in a KubeVirt virt-launcher pod, Proxmox VE's REST API. So the trait is a
//! single call, not a stream; framing, resynchronisation and retries are the
//! implementation's business.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::command::Command;
use crate::error::TransportError;
use crate::reply::Reply;

/// The future a [`Transport::call`] returns. Boxed so the trait stays
/// object-safe: providers can hold a `Box<dyn Transport>`.
pub type CallFuture<'a> = Pin<Box<dyn Future<Output = Result<Reply, TransportError>> + Send + 'a>>;

/// Delivers one command to the guest agent and returns its one reply.
///
/// Contract for implementations:
/// - `Ok(Reply::Error(..))` only for an error the *agent* produced, with its
///   class and description as received (or [`crate::AgentError::without_class`]
///   when the path drops the class);
/// - `Err(..)` when the reply could not be obtained: the command may or may
///   not have run in the guest;
/// - never panic on anything the agent or the network does;
/// - leave the channel usable for the next call (resynchronise if needed).
pub trait Transport: Send + Sync {
    fn call<'a>(&'a self, command: &'a Command) -> CallFuture<'a>;
}

impl<T: Transport + ?Sized> Transport for &T {
    fn call<'a>(&'a self, command: &'a Command) -> CallFuture<'a> {
        (**self).call(command)
    }
}

impl<T: Transport + ?Sized> Transport for Box<T> {
    fn call<'a>(&'a self, command: &'a Command) -> CallFuture<'a> {
        (**self).call(command)
    }
}

impl<T: Transport + ?Sized> Transport for Arc<T> {
    fn call<'a>(&'a self, command: &'a Command) -> CallFuture<'a> {
        (**self).call(command)
    }
}
