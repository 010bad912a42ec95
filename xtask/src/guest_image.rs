//! `cargo xtask guest-image`: the Debian packages the real-guest tests need
//! (QEMU, libvirt, and what goes into the guest), then the guest image
//! itself (`vrouter-guest-image`), cached per machine.

use std::time::Instant;

/// QEMU for the guests, libvirt for the KubeVirt path (`virsh` against a
/// real libvirtd), and the programs copied into the guest.
pub const PACKAGES: [&str; 4] = [
    "qemu-system-x86",
    "libvirt-daemon",
    "libvirt-daemon-driver-qemu",
    "libvirt-clients",
];

pub fn run() -> anyhow::Result<()> {
    let started = Instant::now();
    let mut packages = PACKAGES.to_vec();
    packages.extend(vrouter_test_vm::image::BUILD_PACKAGES);
    crate::prepare::ensure_debian_packages(&packages)?;
    println!("==> guest image");
    let image = vrouter_test_vm::image::ensure(&mut |line| println!("{line}"))?;
    println!(
        "guest image: {} (packages and image ready in {:.1}s)",
        image.dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
