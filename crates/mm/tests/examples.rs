//! The crate's examples (`examples/`) run as tests, so that they keep working: each checks its own results.

#[path = "../examples/guest_address_space.rs"]
mod guest_address_space;
#[path = "../examples/read_maps.rs"]
mod read_maps;

#[test]
fn guest_address_space_example() {
    guest_address_space::main();
}

#[test]
fn read_maps_example() {
    read_maps::main();
}

#[path = "../examples/fault_handler.rs"]
mod fault_handler;

#[test]
fn fault_handler_example() {
    fault_handler::main();
}
