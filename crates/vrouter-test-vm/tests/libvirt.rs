//! Private libvirtds of several test processes on one machine never meet:
//! developers run test binaries side by side, and each starts its own.

use vrouter_test_vm::libvirt::Libvirt;

#[test]
fn two_libvirtds_on_one_machine_both_serve() {
    let first = Libvirt::start().unwrap_or_else(|e| panic!("the first libvirtd: {e}"));
    let second = Libvirt::start().unwrap_or_else(|e| panic!("a second libvirtd beside the first: {e}"));
    for (which, libvirt) in [("first", &first), ("second", &second)] {
        let uri = libvirt
            .virsh(&["uri"])
            .unwrap_or_else(|e| panic!("virsh on the {which} libvirtd: {e}"));
        assert_eq!(uri.trim(), "qemu:///system", "the {which} libvirtd");
        assert_eq!(
            libvirt.virsh(&["list", "--all", "--name"]).unwrap().trim(),
            "",
            "the {which} libvirtd sees no other's domains"
        );
    }
}
