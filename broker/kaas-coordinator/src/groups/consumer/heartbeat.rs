//! ConsumerGroupHeartbeat against a consumer group: validation, join/rejoin (dynamic and
//! static), leave (epoch -1) and static leave (epoch -2), epoch fencing, group-epoch bumps,
//! target assignment and the member's reconciliation. Mirrors Kafka's
//! `GroupMetadataManager.consumerGroupHeartbeat`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::GroupError as E;

use super::assignor::{self, Subscriber};
use super::reconcile::reconcile;
use super::{
    ConsumerGroup, ConsumerMember, LEAVE_EPOCH, MemberState, Partitions, STATIC_LEAVE_EPOCH,
    TopicView,
};
use crate::groups::GroupConfig;

/// A decoded ConsumerGroupHeartbeat, topic ids already resolved to names.
#[derive(Debug, Clone)]
pub struct ConsumerHeartbeat {
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    /// `None`: unchanged since the last heartbeat.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the client owns (`None`: not sent). Partitions of unknown topic ids are
    /// left out, as Kafka ignores them.
    pub owned: Option<BTreeMap<String, BTreeSet<i32>>>,
    pub client_id: String,
    pub client_host: String,
    /// v1+: the client generates its member id (KIP-1082), so it may not be empty.
    pub member_id_required: bool,
    /// The group's `consumer.session.timeout.ms` and `consumer.heartbeat.interval.ms`
    /// overrides (group configs); `None`: the broker's settings.
    pub session_timeout: Option<Duration>,
    pub heartbeat_interval: Option<Duration>,
}

/// A ConsumerGroupHeartbeat answer.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatAnswer {
    pub error: Option<E>,
    pub message: Option<String>,
    pub member_id: Option<String>,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's assignment, sent when it changed or the request was a full one.
    pub assignment: Option<BTreeMap<String, BTreeSet<i32>>>,
}

impl HeartbeatAnswer {
    pub fn error(error: E, message: impl Into<String>) -> HeartbeatAnswer {
        HeartbeatAnswer {
            error: Some(error),
            message: Some(message.into()),
            ..HeartbeatAnswer::default()
        }
    }
}

type Refusal = (E, String);

fn invalid(message: &str) -> Refusal {
    (E::InvalidRequest, message.to_owned())
}

/// Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid`: checks that need no group.
pub(crate) fn validate(req: &ConsumerHeartbeat) -> Result<(), Refusal> {
    if req.group_id.is_empty() {
        return Err((E::InvalidGroupId, "GroupId can't be empty.".into()));
    }
    if req.instance_id.as_deref() == Some("") {
        return Err(invalid("InstanceId can't be empty."));
    }
    if req.rack_id.as_deref() == Some("") {
        return Err(invalid("RackId can't be empty."));
    }
    match req.member_epoch {
        e if e > 0 || e == LEAVE_EPOCH => {
            if req.member_id.is_empty() {
                return Err(invalid("MemberId can't be empty."));
            }
        }
        0 => {
            if req.member_id_required && req.member_id.is_empty() {
                return Err(invalid("MemberId can't be empty."));
            }
            if req.rebalance_timeout_ms == -1 {
                return Err(invalid(
                    "RebalanceTimeoutMs must be provided in first request.",
                ));
            }
            if req
                .owned
                .as_ref()
                .is_some_and(|o| o.values().any(|ps| !ps.is_empty()))
            {
                return Err(invalid("TopicPartitions must be empty when (re-)joining."));
            }
            let names = req
                .subscribed_topic_names
                .as_ref()
                .is_some_and(|n| !n.is_empty());
            if !names
                && req
                    .subscribed_topic_regex
                    .as_deref()
                    .is_none_or(str::is_empty)
            {
                return Err(invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.",
                ));
            }
        }
        STATIC_LEAVE_EPOCH => {
            if req.member_id.is_empty() {
                return Err(invalid("MemberId can't be empty."));
            }
            if req.instance_id.is_none() {
                return Err(invalid("InstanceId can't be null."));
            }
        }
        _ => return Err(invalid("MemberEpoch is invalid.")),
    }
    if let Some(a) = &req.server_assignor
        && !assignor::is_known(a)
    {
        return Err((
            E::UnsupportedAssignor,
            format!("ServerAssignor {a} is not supported. Supported assignors: uniform, range."),
        ));
    }
    if let Some(re) = req
        .subscribed_topic_regex
        .as_deref()
        .filter(|r| !r.is_empty())
    {
        compile(re).map_err(|e| {
            (
                E::InvalidRegularExpression,
                format!("SubscribedTopicRegex {re} is invalid: {e}"),
            )
        })?;
    }
    Ok(())
}

/// A subscription regex matches whole topic names, as Java's `Matcher.matches` does.
fn compile(re: &str) -> Result<regex::Regex, regex::Error> {
    regex::RegexBuilder::new(&format!("^(?:{re})$"))
        .size_limit(1 << 20)
        .build()
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// Runs one heartbeat against the group. The caller persists the group if its value changed.
pub(crate) fn heartbeat(
    cg: &mut ConsumerGroup,
    req: ConsumerHeartbeat,
    topics: &dyn TopicView,
    config: &GroupConfig,
    now: Instant,
) -> HeartbeatAnswer {
    let interval = millis(req.heartbeat_interval.unwrap_or(config.consumer_heartbeat_interval));
    let result = match req.member_epoch {
        LEAVE_EPOCH | STATIC_LEAVE_EPOCH => leave(cg, &req),
        _ => join_or_beat(cg, req, topics, config, now),
    };
    match result {
        Ok(mut answer) => {
            answer.heartbeat_interval_ms = interval;
            answer
        }
        Err((e, message)) => HeartbeatAnswer::error(e, message),
    }
}

/// The member a leave names: by instance id for static members (Kafka's `consumerGroupLeave`).
fn leaving_member(cg: &ConsumerGroup, req: &ConsumerHeartbeat) -> Result<String, Refusal> {
    match &req.instance_id {
        None => cg
            .value
            .members
            .contains_key(&req.member_id)
            .then(|| req.member_id.clone())
            .ok_or_else(|| {
                (
                    E::UnknownMemberId,
                    format!(
                        "Member {} is not a member of group {}.",
                        req.member_id, req.group_id
                    ),
                )
            }),
        Some(iid) => match cg.static_member(iid) {
            None => Err((E::UnknownMemberId, format!("Instance id {iid} is unknown."))),
            Some(m) if m.id != req.member_id => Err((
                E::FencedInstanceId,
                format!("Instance id {iid} belongs to another member."),
            )),
            Some(m) => Ok(m.id.clone()),
        },
    }
}

fn leave(cg: &mut ConsumerGroup, req: &ConsumerHeartbeat) -> Result<HeartbeatAnswer, Refusal> {
    let id = leaving_member(cg, req)?;
    if req.member_epoch == STATIC_LEAVE_EPOCH {
        // A static member that will be back: it keeps its assignment (and the group its
        // epoch) until it rejoins under the same instance id or its session expires.
        if let Some(m) = cg.value.members.get_mut(&id) {
            m.previous_epoch = m.member_epoch;
            m.member_epoch = STATIC_LEAVE_EPOCH;
        }
        cg.revoke_by.remove(&id);
    } else {
        cg.remove_member(&id);
        tracing::info!(group = %req.group_id, member = %id, "member left the consumer group");
    }
    Ok(HeartbeatAnswer {
        member_id: Some(id),
        member_epoch: req.member_epoch,
        ..HeartbeatAnswer::default()
    })
}

/// The member a joining or beating request is about, with fencing (Kafka's
/// `getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember`). Returns the member and whether it
/// is new to the group.
fn find_member(
    cg: &mut ConsumerGroup,
    req: &ConsumerHeartbeat,
    config: &GroupConfig,
) -> Result<(ConsumerMember, bool), Refusal> {
    if req.member_epoch == 0 {
        if let Some(iid) = &req.instance_id
            && let Some(old) = cg.static_member(iid).cloned()
        {
            if old.id == req.member_id {
                return Ok((old, false));
            }
            if old.member_epoch != STATIC_LEAVE_EPOCH {
                return Err((
                    E::UnreleasedInstanceId,
                    format!(
                        "Static member {} with instance id {iid} is still in use.",
                        old.id
                    ),
                ));
            }
            // KIP-345 for consumer groups: the new incarnation takes the old one's place,
            // assignment and target, without a new group epoch.
            let target = cg.value.target.remove(&old.id);
            cg.value.members.remove(&old.id);
            cg.session.remove(&old.id);
            cg.revoke_by.remove(&old.id);
            let id = new_member_id(&req.member_id);
            if let Some(t) = target {
                cg.value.target.insert(id.clone(), t);
            }
            let member = ConsumerMember {
                id,
                member_epoch: 0,
                previous_epoch: 0,
                ..old
            };
            cg.value.members.insert(member.id.clone(), member.clone());
            return Ok((member, false));
        }
        if let Some(m) = cg.value.members.get(&req.member_id) {
            return Ok((m.clone(), false));
        }
        if cg.value.members.len() >= config.max_size {
            return Err((
                E::GroupMaxSizeReached,
                format!(
                    "The consumer group has reached its maximum capacity of {} members.",
                    config.max_size
                ),
            ));
        }
        return Ok((ConsumerMember::new(&new_member_id(&req.member_id)), true));
    }
    let Some(member) = cg.value.members.get(&req.member_id) else {
        return Err((
            E::UnknownMemberId,
            format!(
                "Member {} is not a member of group {}.",
                req.member_id, req.group_id
            ),
        ));
    };
    if let Some(iid) = &req.instance_id {
        match cg.static_member(iid) {
            None => return Err((E::UnknownMemberId, format!("Instance id {iid} is unknown."))),
            Some(s) if s.id != req.member_id => {
                return Err((
                    E::FencedInstanceId,
                    format!("Instance id {iid} belongs to another member."),
                ));
            }
            Some(_) => {}
        }
    }
    check_epoch(member, req.member_epoch, req.owned.as_ref())?;
    Ok((member.clone(), false))
}

/// v0 lets the coordinator pick the member id.
fn new_member_id(requested: &str) -> String {
    if requested.is_empty() {
        uuid::Uuid::new_v4().to_string()
    } else {
        requested.to_owned()
    }
}

/// Kafka's `throwIfConsumerGroupMemberEpochIsInvalid`: a member one epoch behind whose owned
/// partitions are a subset of its assignment only missed a response and may continue.
fn check_epoch(
    member: &ConsumerMember,
    epoch: i32,
    owned: Option<&Partitions>,
) -> Result<(), Refusal> {
    let fenced = || {
        (
            E::FencedMemberEpoch,
            format!(
                "The consumer group member has a different member epoch ({epoch}) than the one known by the group coordinator ({}). The member must abandon all its partitions and rejoin.",
                member.member_epoch
            ),
        )
    };
    if epoch > member.member_epoch {
        return Err(fenced());
    }
    if epoch < member.member_epoch {
        let subset = owned.is_some_and(|o| {
            o.iter().all(|(t, ps)| {
                ps.is_empty() || member.assigned.get(t).is_some_and(|a| ps.is_subset(a))
            })
        });
        if epoch != member.previous_epoch || !subset {
            return Err(fenced());
        }
    }
    Ok(())
}

fn join_or_beat(
    cg: &mut ConsumerGroup,
    req: ConsumerHeartbeat,
    topics: &dyn TopicView,
    config: &GroupConfig,
    now: Instant,
) -> Result<HeartbeatAnswer, Refusal> {
    let (mut member, is_new) = find_member(cg, &req, config)?;
    let before_assigned = member.assigned.clone();
    let before_subscription = (
        member.subscribed_names.clone(),
        member.subscribed_regex.clone(),
    );
    if req.rebalance_timeout_ms != -1 {
        member.rebalance_timeout_ms = req.rebalance_timeout_ms;
    }
    if let Some(names) = &req.subscribed_topic_names {
        let mut names = names.clone();
        names.sort();
        names.dedup();
        member.subscribed_names = names;
    }
    if let Some(re) = &req.subscribed_topic_regex {
        member.subscribed_regex = (!re.is_empty()).then(|| re.clone());
    }
    if req.server_assignor.is_some() {
        member.server_assignor = req.server_assignor.clone();
    }
    if req.rack_id.is_some() {
        member.rack_id = req.rack_id.clone();
    }
    if req.instance_id.is_some() {
        member.instance_id = req.instance_id.clone();
    }
    member.client_id = req.client_id.clone();
    member.client_host = req.client_host.clone();
    let mut bump = is_new
        || before_subscription
            != (
                member.subscribed_names.clone(),
                member.subscribed_regex.clone(),
            );
    if is_new {
        tracing::info!(group = %req.group_id, member = %member.id, "member joined the consumer group");
    }
    let id = member.id.clone();
    cg.value.members.insert(id.clone(), member);

    let metadata = subscription_metadata(cg, topics);
    if metadata != cg.value.topics {
        cg.value.topics = metadata;
        bump = true;
    }
    if bump {
        cg.value.group_epoch += 1;
    }
    if cg.value.group_epoch > cg.value.assignment_epoch {
        compute_target(cg, topics);
    }

    let held = cg.held_by_others(&id);
    let target = cg.value.target.get(&id).cloned().unwrap_or_default();
    let assignment_epoch = cg.value.assignment_epoch;
    let Some(member) = cg.value.members.get_mut(&id) else {
        return Err((E::UnknownServerError, "member vanished".into()));
    };
    reconcile(member, assignment_epoch, &target, req.owned.as_ref(), &held);
    let member = member.clone();

    if member.state == MemberState::UnrevokedPartitions {
        let timeout =
            Duration::from_millis(u64::try_from(member.rebalance_timeout_ms).unwrap_or(0));
        cg.revoke_by.entry(id.clone()).or_insert(now + timeout);
    } else {
        cg.revoke_by.remove(&id);
    }
    cg.session.insert(
        id.clone(),
        now + req.session_timeout.unwrap_or(config.consumer_session_timeout),
    );

    let full = req.member_epoch == 0
        || (req.rebalance_timeout_ms != -1
            && req.subscribed_topic_names.is_some()
            && req.owned.is_some());
    let assignment = (full || member.assigned != before_assigned).then(|| member.assigned.clone());
    Ok(HeartbeatAnswer {
        member_id: Some(id),
        member_epoch: member.member_epoch,
        assignment,
        ..HeartbeatAnswer::default()
    })
}

/// The topics a member subscribes to that exist now: its names and its regex's matches.
fn subscribed(
    member: &ConsumerMember,
    topics: &dyn TopicView,
    all_names: &mut Option<Vec<String>>,
) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = member
        .subscribed_names
        .iter()
        .filter(|t| topics.partition_count(t).is_some())
        .cloned()
        .collect();
    if let Some(re) = member
        .subscribed_regex
        .as_deref()
        .and_then(|r| compile(r).ok())
    {
        let names = all_names.get_or_insert_with(|| topics.topic_names());
        out.extend(names.iter().filter(|n| re.is_match(n)).cloned());
    }
    out
}

/// Partition counts of every topic some member subscribes to: a change is a new group epoch
/// (a topic created, deleted or given more partitions).
fn subscription_metadata(cg: &ConsumerGroup, topics: &dyn TopicView) -> BTreeMap<String, i32> {
    let mut names = None;
    cg.value
        .members
        .values()
        .flat_map(|m| subscribed(m, topics, &mut names))
        .filter_map(|t| topics.partition_count(&t).map(|n| (t, n)))
        .collect()
}

/// A new target assignment for the current group epoch.
fn compute_target(cg: &mut ConsumerGroup, topics: &dyn TopicView) {
    let mut names = None;
    let subscribers: Vec<Subscriber> = cg
        .value
        .members
        .values()
        .map(|m| Subscriber {
            id: m.id.clone(),
            topics: subscribed(m, topics, &mut names),
        })
        .collect();
    let counts: BTreeMap<String, i32> = cg
        .value
        .topics
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(t, n)| (t.clone(), *n))
        .collect();
    cg.value.target = assignor::assign(cg.assignor(), &subscribers, &counts, &cg.value.target);
    cg.value.assignment_epoch = cg.value.group_epoch;
}

#[cfg(test)]
mod tests;
