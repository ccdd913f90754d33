//! Faults an in-process cluster can switch on per broker: its volume mount sick (EIO, ENOSPC,
//! ESTALE, slow fsync, through `kaas_shared::fs::FaultyFs`) and its view of the API server's
//! Lease gone (every get and put fails, as when the API server is unreachable from that pod).
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;
use kaas_controller::lease::{LeaseState, LeaseStore, VersionedLease};

/// One broker's way to the shared Lease, which can be cut.
#[derive(Debug)]
pub struct CuttableLease {
    inner: Arc<dyn LeaseStore>,
    cut: Arc<AtomicBool>,
}

impl CuttableLease {
    /// `inner`, failing while `cut` is set.
    pub fn new(inner: Arc<dyn LeaseStore>, cut: Arc<AtomicBool>) -> CuttableLease {
        CuttableLease { inner, cut }
    }

    fn unreachable(&self) -> Option<kaas_controller::Error> {
        self.cut.load(Ordering::SeqCst).then(|| kaas_controller::Error::Lease("the API server is unreachable (fault injected)".into()))
    }
}

impl LeaseStore for CuttableLease {
    fn get(&self) -> BoxFuture<'_, kaas_controller::Result<Option<VersionedLease>>> {
        match self.unreachable() {
            Some(e) => Box::pin(async move { Err(e) }),
            None => self.inner.get(),
        }
    }

    fn put(&self, state: LeaseState, expected: Option<String>) -> BoxFuture<'_, kaas_controller::Result<bool>> {
        match self.unreachable() {
            Some(e) => Box::pin(async move { Err(e) }),
            None => self.inner.put(state, expected),
        }
    }
}
