//! Host tests of the rings with no kernel: test memory plays the mapping, a test "kernel"
//! (written against `rrxe_uapi`'s layout, not against this module) plays the other side.

mod construct_tests;
mod cq_tests;
pub(crate) mod harness;
mod proptests;
mod protocol_model;
mod rq_tests;
mod sq_tests;
mod threads;
