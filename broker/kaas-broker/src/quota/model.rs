//! Kafka's client quotas (KIP-13, KIP-55, KIP-546, KIP-612): entities — a user, a client id, or
//! both, or an IP address, each a name or the default —, the quota keys kaas enforces, which
//! configured entity's quota applies to a client, and DescribeClientQuotas' filters. No wire types.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

/// An entity's name: a specific one, or the default for every name without its own.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityName {
    Default,
    Named(String),
}

impl EntityName {
    /// The wire form: the name, `None` for the default.
    pub fn as_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }

    fn from_wire(name: Option<&str>) -> EntityName {
        name.map_or(EntityName::Default, |n| EntityName::Named(n.to_string()))
    }
}

/// A quota entity: `/users/<user>`, `/clients/<client-id>`, `/users/<user>/clients/<client-id>`,
/// or `/ips/<ip>` (which combines with nothing).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Entity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<EntityName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<EntityName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<EntityName>,
}

/// The entity types of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityType {
    User,
    ClientId,
    Ip,
}

impl EntityType {
    pub fn parse(name: &str) -> Result<EntityType, InvalidQuota> {
        match name {
            "user" => Ok(EntityType::User),
            "client-id" => Ok(EntityType::ClientId),
            "ip" => Ok(EntityType::Ip),
            other => Err(InvalidQuota::UnknownEntityType(other.to_string())),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            EntityType::User => "user",
            EntityType::ClientId => "client-id",
            EntityType::Ip => "ip",
        }
    }
}

impl Entity {
    /// An entity from its wire components (type, name or `None` for the default).
    pub fn from_components<'a>(components: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> Result<Entity, InvalidQuota> {
        let mut entity = Entity::default();
        for (entity_type, name) in components {
            let slot = match EntityType::parse(entity_type)? {
                EntityType::User => &mut entity.user,
                EntityType::ClientId => &mut entity.client_id,
                EntityType::Ip => {
                    // Kafka keeps an address as written once it parses; kaas keeps its canonical
                    // form, the one connections are counted by.
                    let parsed = name.map(|n| n.parse::<IpAddr>().map_err(|_| InvalidQuota::BadIp(n.to_string()))).transpose()?;
                    if entity
                        .ip
                        .replace(parsed.map_or(EntityName::Default, |ip| EntityName::Named(ip.to_canonical().to_string())))
                        .is_some()
                    {
                        return Err(InvalidQuota::DuplicateEntityType(entity_type.to_string()));
                    }
                    continue;
                }
            };
            if slot.replace(EntityName::from_wire(name)).is_some() {
                return Err(InvalidQuota::DuplicateEntityType(entity_type.to_string()));
            }
        }
        match (&entity.user, &entity.client_id, &entity.ip) {
            (None, None, None) => Err(InvalidQuota::EmptyEntity),
            (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => Err(InvalidQuota::IpWithOthers),
            _ => Ok(entity),
        }
    }

    /// The wire components, user first.
    pub fn components(&self) -> Vec<(EntityType, Option<&str>)> {
        let user = self.user.as_ref().map(|n| (EntityType::User, n.as_wire()));
        let client = self.client_id.as_ref().map(|n| (EntityType::ClientId, n.as_wire()));
        let ip = self.ip.as_ref().map(|n| (EntityType::Ip, n.as_wire()));
        user.into_iter().chain(client).chain(ip).collect()
    }

    fn types(&self) -> BTreeSet<EntityType> {
        self.components().into_iter().map(|(t, _)| t).collect()
    }

    fn name_of(&self, entity_type: EntityType) -> Option<&EntityName> {
        match entity_type {
            EntityType::User => self.user.as_ref(),
            EntityType::ClientId => self.client_id.as_ref(),
            EntityType::Ip => self.ip.as_ref(),
        }
    }
}

/// The quotas kaas enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaKey {
    /// Bytes of produce requests a second.
    ProducerByteRate,
    /// Bytes of fetch responses a second.
    ConsumerByteRate,
    /// New connections a second from one address (KIP-612; `ip` entities only).
    ConnectionCreationRate,
    /// Percent of one thread's time spent on the client's requests (KIP-124).
    RequestPercentage,
    /// Partitions created, added or deleted a second (KIP-599).
    ControllerMutationRate,
}

impl QuotaKey {
    pub fn name(self) -> &'static str {
        match self {
            QuotaKey::ProducerByteRate => "producer_byte_rate",
            QuotaKey::ConsumerByteRate => "consumer_byte_rate",
            QuotaKey::ConnectionCreationRate => "connection_creation_rate",
            QuotaKey::RequestPercentage => "request_percentage",
            QuotaKey::ControllerMutationRate => "controller_mutation_rate",
        }
    }

    /// One bit per key (a set of keys in a byte).
    pub fn bit(self) -> u8 {
        1 << (self as u8)
    }

    pub fn parse(name: &str) -> Result<QuotaKey, InvalidQuota> {
        match name {
            "producer_byte_rate" => Ok(QuotaKey::ProducerByteRate),
            "consumer_byte_rate" => Ok(QuotaKey::ConsumerByteRate),
            "connection_creation_rate" => Ok(QuotaKey::ConnectionCreationRate),
            "request_percentage" => Ok(QuotaKey::RequestPercentage),
            "controller_mutation_rate" => Ok(QuotaKey::ControllerMutationRate),
            other => Err(InvalidQuota::UnknownKey(other.to_string())),
        }
    }

    /// A rate must be positive, and whole for the byte and connection rates (Kafka's LONG and
    /// INT keys; the others are DOUBLEs), and the key one of the entity's kind: connections for
    /// an address, the others for users and clients.
    pub fn validate(self, entity: &Entity, value: f64) -> Result<(), InvalidQuota> {
        if (self == QuotaKey::ConnectionCreationRate) != entity.ip.is_some() {
            return Err(InvalidQuota::KeyNotForEntity(self.name()));
        }
        let fractional = matches!(self, QuotaKey::RequestPercentage | QuotaKey::ControllerMutationRate);
        let whole = fractional || (value >= 1.0 && value.fract() == 0.0);
        if value.is_finite() && value > 0.0 && whole && value <= i64::MAX as f64 {
            Ok(())
        } else {
            Err(InvalidQuota::BadValue { key: self.name(), value })
        }
    }
}

/// What the errors list as enforced.
const ENFORCED: &str = "producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate and connection_creation_rate";

/// Every configured quota: by entity, the values it sets.
pub type QuotaTable = BTreeMap<Entity, BTreeMap<QuotaKey, f64>>;

/// Why a quota entity, filter or change is refused (INVALID_REQUEST at the protocol edge).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidQuota {
    #[error("unknown quota entity type {0:?} (user, client-id or ip)")]
    UnknownEntityType(String),
    #[error("{0:?} is not an IP address")]
    BadIp(String),
    #[error("an ip entity combines with no user or client-id")]
    IpWithOthers,
    #[error("{0} does not apply to this entity: connection_creation_rate is for ip entities, the others for users and client ids")]
    KeyNotForEntity(&'static str),
    #[error("entity type {0:?} given twice")]
    DuplicateEntityType(String),
    #[error("a quota entity needs a user, a client-id or both")]
    EmptyEntity,
    #[error("unknown quota key {0:?} (kaas enforces {ENFORCED})")]
    UnknownKey(String),
    #[error("quota key {0:?} given twice")]
    DuplicateKey(String),
    #[error("{key} must be a positive number (whole for byte and connection rates), got {value}")]
    BadValue { key: &'static str, value: f64 },
    #[error("unknown match type {0} (0: exact name, 1: default, 2: any name)")]
    UnknownMatchType(i8),
    #[error("an exact match of {0:?} needs a name")]
    MissingMatch(String),
}

/// The quota in force for one client, and the sensor its usage is counted in: clients whose
/// quota comes from one entity share its sensor, with a default name standing for each name.
#[derive(Debug, Clone, PartialEq)]
pub struct Applicable {
    pub bound: f64,
    pub sensor: SensorKey,
}

/// A sensor: the quota key and the user and client id tags Kafka's metrics carry (`""`
/// where the applicable entity has no such component), or the address connections come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SensorKey {
    pub key: QuotaKey,
    pub user: String,
    pub client_id: String,
    pub ip: Option<IpAddr>,
}

/// Which quota applies to `user` with `client_id` for `key`: the first configured of Kafka's
/// eight levels, most specific first — `/users/<user>/clients/<client>`,
/// `/users/<user>/clients/<default>`, `/users/<user>`, `/users/<default>/clients/<client>`,
/// `/users/<default>/clients/<default>`, `/users/<default>`, `/clients/<client>`,
/// `/clients/<default>`.
pub fn applicable(table: &QuotaTable, key: QuotaKey, user: &str, client_id: &str) -> Option<Applicable> {
    use EntityName::{Default, Named};
    let named_user = || Some(Named(user.to_string()));
    let named_client = || Some(Named(client_id.to_string()));
    let levels = [
        (named_user(), named_client()),
        (named_user(), Some(Default)),
        (named_user(), None),
        (Some(Default), named_client()),
        (Some(Default), Some(Default)),
        (Some(Default), None),
        (None, named_client()),
        (None, Some(Default)),
    ];
    levels.into_iter().find_map(|(u, c)| {
        let tags = SensorKey {
            key,
            user: if u.is_some() { user.to_string() } else { String::new() },
            client_id: if c.is_some() { client_id.to_string() } else { String::new() },
            ip: None,
        };
        let bound = *table.get(&Entity { user: u, client_id: c, ip: None })?.get(&key)?;
        Some(Applicable { bound, sensor: tags })
    })
}

/// The connection_creation_rate of `ip`: its own (`/ips/<ip>`), else the default one
/// (`/ips/<default>`), counted per address either way.
pub fn applicable_to_address(table: &QuotaTable, ip: IpAddr) -> Option<Applicable> {
    let key = QuotaKey::ConnectionCreationRate;
    let levels = [EntityName::Named(ip.to_canonical().to_string()), EntityName::Default];
    levels.into_iter().find_map(|level| {
        let bound = *table.get(&Entity { ip: Some(level), ..Entity::default() })?.get(&key)?;
        let sensor = SensorKey { key, user: String::new(), client_id: String::new(), ip: Some(ip) };
        Some(Applicable { bound, sensor })
    })
}

/// How a filter component matches an entity's name of its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameMatch {
    Exact(String),
    Default,
    /// Any specific name (not the default).
    Specified,
}

/// A DescribeClientQuotas filter: every component must match; `strict` also refuses entities
/// with components of other types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaFilter {
    components: Vec<(EntityType, NameMatch)>,
    strict: bool,
}

impl QuotaFilter {
    /// A filter from its wire components (type, match type, match).
    pub fn parse<'a>(
        components: impl IntoIterator<Item = (&'a str, i8, Option<&'a str>)>,
        strict: bool,
    ) -> Result<QuotaFilter, InvalidQuota> {
        let mut parsed = Vec::new();
        let mut seen = BTreeSet::new();
        for (entity_type, match_type, name) in components {
            let t = EntityType::parse(entity_type)?;
            if !seen.insert(t) {
                return Err(InvalidQuota::DuplicateEntityType(entity_type.to_string()));
            }
            let matcher = match match_type {
                0 => NameMatch::Exact(name.ok_or_else(|| InvalidQuota::MissingMatch(entity_type.to_string()))?.to_string()),
                1 => NameMatch::Default,
                2 => NameMatch::Specified,
                other => return Err(InvalidQuota::UnknownMatchType(other)),
            };
            parsed.push((t, matcher));
        }
        Ok(QuotaFilter { components: parsed, strict })
    }

    pub fn matches(&self, entity: &Entity) -> bool {
        let all_match = self.components.iter().all(|(t, m)| match (entity.name_of(*t), m) {
            (Some(EntityName::Named(n)), NameMatch::Exact(want)) => n == want,
            (Some(EntityName::Default), NameMatch::Default) => true,
            (Some(EntityName::Named(_)), NameMatch::Specified) => true,
            _ => false,
        });
        all_match && (!self.strict || entity.types() == self.components.iter().map(|(t, _)| *t).collect())
    }
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
