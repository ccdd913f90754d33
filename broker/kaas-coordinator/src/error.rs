//! The coordinators' errors: [`Error`] for owning and loading shards, [`GroupError`] for the
//! answers the group protocol gives a member (the broker maps each to its Kafka error code).

/// Taking a shard over, handing it over, or reading what it holds failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Shard(#[from] crate::shard_log::Error),
    #[error("no {kind} shard {shard}")]
    NoSuchShard { kind: &'static str, shard: u32 },
    #[error("unreadable {what} record {key:?} in shard {dir}")]
    UnreadableRecord {
        what: &'static str,
        key: String,
        dir: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An answer of the group protocol that is not success. Named as the Kafka error code each
/// becomes, since the protocol's clients act on exactly these distinctions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum GroupError {
    #[error("the group's coordinator is not available (its shard is loading or failed)")]
    CoordinatorNotAvailable,
    #[error("this broker is not the group's coordinator")]
    NotCoordinator,
    #[error("another member uses this group instance id")]
    FencedInstanceId,
    #[error("not authorized to join or use the group")]
    GroupAuthorizationFailed,
    #[error("the member's epoch is fenced")]
    FencedMemberEpoch,
    #[error("the member's epoch is stale")]
    StaleMemberEpoch,
    #[error("no such group")]
    GroupIdNotFound,
    #[error("the group is full")]
    GroupMaxSizeReached,
    #[error("the group is subscribed to the topic")]
    GroupSubscribedToTopic,
    #[error("the member's generation is not the group's")]
    IllegalGeneration,
    #[error("the member's protocols are not the group's")]
    InconsistentGroupProtocol,
    #[error("the commit's metadata is too large")]
    InvalidCommitOffsetSize,
    #[error("invalid group id")]
    InvalidGroupId,
    #[error("invalid regular expression")]
    InvalidRegularExpression,
    #[error("invalid request")]
    InvalidRequest,
    #[error("the session timeout is out of bounds")]
    InvalidSessionTimeout,
    #[error("the member must rejoin with the member id it was given")]
    MemberIdRequired,
    #[error("the group is not empty")]
    NonEmptyGroup,
    #[error("the group is rebalancing")]
    RebalanceInProgress,
    #[error("unknown member")]
    UnknownMemberId,
    #[error("unexpected coordinator failure")]
    UnknownServerError,
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    #[error("the static member's instance id is still held")]
    UnreleasedInstanceId,
    #[error("the group does not support the assignor")]
    UnsupportedAssignor,
    #[error("unsupported version of the protocol")]
    UnsupportedVersion,
}
