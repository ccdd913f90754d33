//! The parts of the kaas binary that its integration tests run too: the cluster runtime that
//! wires a broker to the controller role and the heartbeat.

pub mod cluster;
