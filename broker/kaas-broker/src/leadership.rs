//! Who leads a partition. In local mode the lease shim says "this broker, always" (seed 003's
//! local-dev mode); the cluster runtime answers from its view of assignment.json instead.

/// The local lease shim: this broker leads every partition.
#[derive(Debug, Clone, Copy)]
pub struct LocalLease {
    pub node_id: i32,
}

impl LocalLease {
    pub fn new(node_id: i32) -> LocalLease {
        LocalLease { node_id }
    }

    /// The epoch a take-over uses: one past the newest epoch on disk, so every restart starts a
    /// new leadership epoch and a fresh segment, as a leadership move in a cluster does.
    pub fn takeover_epoch(&self, on_disk_epoch: i32) -> i32 {
        on_disk_epoch.saturating_add(1).max(0)
    }
}
