//! The broker's error type and its mapping to Kafka error codes at the protocol edge.

use kaas_coordinator::GroupError;
use kaas_coordinator::txn::TxnError;
use kafka_protocol::ResponseError;

/// Errors of the broker crate. Each maps to exactly one Kafka error code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("storage: {0}")]
    Storage(#[from] kaas_storage::Error),
    #[error("volume: {0}")]
    Volume(#[from] kaas_shared::Error),
    #[error("coordinator: {0}")]
    Coordinator(#[from] kaas_coordinator::Error),
    #[error("unknown topic or partition {0}")]
    UnknownTopicOrPartition(String),
    #[error("unknown topic id {0}")]
    UnknownTopicId(uuid::Uuid),
    #[error("topic {0} already exists")]
    TopicExists(String),
    #[error("invalid topic name {name:?}: {reason}")]
    InvalidTopic { name: String, reason: String },
    #[error("invalid partition count: {0}")]
    InvalidPartitions(String),
    #[error("invalid replication factor: {0}")]
    InvalidReplicationFactor(String),
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("this broker does not lead {0}")]
    NotLeader(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("topic catalog: {0}")]
    Catalog(String),
    #[error("topic {0} not auto-created: more than auto.create.topics.per.minute topics were auto-created in the last minute")]
    AutoCreateThrottled(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<kaas_coordinator::shard_log::Error> for Error {
    fn from(e: kaas_coordinator::shard_log::Error) -> Error {
        Error::Coordinator(e.into())
    }
}

impl Error {
    /// The Kafka error this becomes on the wire.
    pub fn response_error(&self) -> ResponseError {
        use kaas_storage::Error as S;
        match self {
            Error::Storage(e) => match e {
                S::CorruptRecord(_) => ResponseError::CorruptMessage,
                S::RecordTooLarge { .. } => ResponseError::MessageTooLarge,
                S::InvalidRecord(_) => ResponseError::InvalidRecord,
                S::InvalidTimestamp { .. } | S::LogAppendTimeFromClient => ResponseError::InvalidTimestamp,
                S::NotLeader => ResponseError::NotLeaderOrFollower,
                S::FencedLeaderEpoch { .. } => ResponseError::FencedLeaderEpoch,
                S::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
                S::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber,
                S::InvalidProducerEpoch { .. } => ResponseError::InvalidProducerEpoch,
                S::CoordinatorFenced { .. } => ResponseError::TransactionCoordinatorFenced,
                S::UnknownProducerId(_) => ResponseError::UnknownProducerId,
                S::Abandoned => ResponseError::UnknownTopicOrPartition,
                S::InvalidConfig { .. } => ResponseError::InvalidConfig,
                _ => ResponseError::KafkaStorageError,
            },
            Error::Volume(_) | Error::Io(_) => ResponseError::KafkaStorageError,
            Error::Coordinator(kaas_coordinator::Error::Shard(e)) if e.not_owner() => ResponseError::NotCoordinator,
            Error::Coordinator(_) => ResponseError::CoordinatorNotAvailable,
            Error::UnknownTopicOrPartition(_) => ResponseError::UnknownTopicOrPartition,
            Error::UnknownTopicId(_) => ResponseError::UnknownTopicId,
            Error::TopicExists(_) => ResponseError::TopicAlreadyExists,
            Error::InvalidTopic { .. } => ResponseError::InvalidTopicException,
            Error::InvalidPartitions(_) => ResponseError::InvalidPartitions,
            Error::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
            Error::InvalidConfig(_) => ResponseError::InvalidConfig,
            Error::InvalidRequest(_) => ResponseError::InvalidRequest,
            Error::NotLeader(_) => ResponseError::NotLeaderOrFollower,
            Error::Timeout(_) => ResponseError::RequestTimedOut,
            Error::Catalog(_) => ResponseError::UnknownServerError,
            // Retriable for every client: it asks again later and the topic appears then.
            Error::AutoCreateThrottled(_) => ResponseError::LeaderNotAvailable,
        }
    }

    /// The wire code of [`Error::response_error`].
    pub fn code(&self) -> i16 {
        self.response_error().code()
    }
}

/// The Kafka error each answer of the group protocol becomes on the wire.
pub fn group_error(e: GroupError) -> ResponseError {
    use GroupError as G;
    use ResponseError as R;
    match e {
        G::CoordinatorNotAvailable => R::CoordinatorNotAvailable,
        G::NotCoordinator => R::NotCoordinator,
        G::FencedInstanceId => R::FencedInstanceId,
        G::GroupAuthorizationFailed => R::GroupAuthorizationFailed,
        G::FencedMemberEpoch => R::FencedMemberEpoch,
        G::StaleMemberEpoch => R::StaleMemberEpoch,
        G::GroupIdNotFound => R::GroupIdNotFound,
        G::GroupMaxSizeReached => R::GroupMaxSizeReached,
        G::GroupSubscribedToTopic => R::GroupSubscribedToTopic,
        G::IllegalGeneration => R::IllegalGeneration,
        G::InconsistentGroupProtocol => R::InconsistentGroupProtocol,
        G::InvalidCommitOffsetSize => R::InvalidCommitOffsetSize,
        G::InvalidGroupId => R::InvalidGroupId,
        G::InvalidRegularExpression => R::InvalidRegularExpression,
        G::InvalidRequest => R::InvalidRequest,
        G::InvalidSessionTimeout => R::InvalidSessionTimeout,
        G::MemberIdRequired => R::MemberIdRequired,
        G::NonEmptyGroup => R::NonEmptyGroup,
        G::RebalanceInProgress => R::RebalanceInProgress,
        G::UnknownMemberId => R::UnknownMemberId,
        G::UnknownServerError => R::UnknownServerError,
        G::UnknownTopicOrPartition => R::UnknownTopicOrPartition,
        G::UnreleasedInstanceId => R::UnreleasedInstanceId,
        G::UnsupportedAssignor => R::UnsupportedAssignor,
        G::UnsupportedVersion => R::UnsupportedVersion,
    }
}

/// `.code()` on a group-protocol answer, as on a Kafka error.
pub trait GroupErrorCode {
    fn code(&self) -> i16;
}

impl GroupErrorCode for GroupError {
    fn code(&self) -> i16 {
        group_error(*self).code()
    }
}

/// The Kafka error a transaction coordinator's refusal becomes on the wire.
pub fn txn_error(e: &TxnError) -> ResponseError {
    match e {
        TxnError::ProducerIdMapping { .. } => ResponseError::InvalidProducerIdMapping,
        TxnError::Fenced { .. } => ResponseError::ProducerFenced,
        TxnError::Concurrent(_) => ResponseError::ConcurrentTransactions,
        TxnError::InvalidState { .. } => ResponseError::InvalidTxnState,
        TxnError::InvalidTimeout(_) => ResponseError::InvalidTransactionTimeout,
        TxnError::NotCoordinator => ResponseError::NotCoordinator,
        TxnError::Storage(_) | TxnError::ProducerIds(_) => ResponseError::CoordinatorNotAvailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinator_answers_become_the_kafka_errors_clients_act_on() {
        assert_eq!(txn_error(&TxnError::Fenced { found: 0, current: 1 }), ResponseError::ProducerFenced);
        assert_eq!(txn_error(&TxnError::NotCoordinator), ResponseError::NotCoordinator);
        assert_eq!(group_error(GroupError::RebalanceInProgress), ResponseError::RebalanceInProgress);
        assert_eq!(GroupError::UnknownMemberId.code(), ResponseError::UnknownMemberId.code());
    }
}
