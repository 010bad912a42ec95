//! Compiles `proto/vrouter/control/v1/control.proto` into the gRPC client
//! (and the server trait the tests implement). protox parses the proto in
//! pure Rust, so building this crate needs no `protoc` on the machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/vrouter/control/v1/control.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .build_transport(false)
        .compile_fds(descriptors)?;
    Ok(())
}
