//! Errors of the controller crate.

/// Why a controller or heartbeat step failed; every one of them is retried by its loop.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("volume: {0}")]
    Volume(#[from] kaas_shared::Error),
    #[error("lease store: {0}")]
    Lease(String),
    #[error("publishing status: {0}")]
    Publish(String),
    #[error("heartbeat transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("heartbeat stream: {0}")]
    Status(#[from] tonic::Status),
    #[error("no controller is known yet")]
    NoController,
    #[error("the list of live topics is not known yet")]
    TopicsNotSynced,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
