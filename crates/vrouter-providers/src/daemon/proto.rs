//! Generated from `proto/vrouter/control/v1/control.proto` by `build.rs`.
//! The server half is generated too: tests and `vrouter-test-peers` serve
//! it to exercise the client against a real gRPC peer.

#![allow(clippy::all, clippy::pedantic, missing_docs)]

tonic::include_proto!("vrouter.control.v1");
