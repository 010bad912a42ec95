//! A stand-in for a test process that dies, used by this crate's own tests
//! (`tests/harness.rs`) to prove the harness cleans up after it.
//!
//! `vrouter-test-apiserver-probe start`: starts a private and the shared control
//! plane, prints `PROBE <etcd pid> <kube-apiserver pid> <data dir>` for each and
//! `PROBE-READY`, then panics as soon as a line arrives on stdin (the parent may
//! SIGKILL it instead).
//! `vrouter-test-apiserver-probe shared`: only asks for the shared control plane, so
//! a missing binary makes it fail the way a test would.

use std::io::Write;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use vrouter_test_apiserver::TestEnv;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    match mode.as_str() {
        "shared" => {
            TestEnv::shared().await;
        }
        "start" => start_then_panic().await,
        other => panic!("usage: vrouter-test-apiserver-probe start|shared (got {other:?})"),
    }
}

async fn start_then_panic() {
    let owned = TestEnv::start().await.expect("a private control plane starts");
    let shared = TestEnv::shared().await;
    // Both really serve before the probe dies.
    Api::<Namespace>::all(owned.client())
        .list(&Default::default())
        .await
        .expect("the private API server answers");
    shared.namespace("probe").await;
    for env in [&owned, shared] {
        let (etcd, apiserver) = env.pids();
        println!("PROBE {etcd} {apiserver} {}", env.data_dir().display());
    }
    println!("PROBE-READY");
    std::io::stdout().flush().expect("stdout is open");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    panic!("the probe panics on purpose; the harness must clean up after it");
}
