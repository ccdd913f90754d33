//! Storage scenarios, each written once and run against the in-memory filesystem and a real
//! temp directory (STYLE habit 7).

#![allow(clippy::unwrap_used)]

mod scenarios {
    pub(crate) mod support;

    mod append;
    mod compaction;
    mod directory_sync;
    mod durability;
    mod golden;
    mod idempotence;
    mod leadership;
    mod lookups;
    mod reads;
    mod recovery;
    mod retention;
    mod transactions;
}
