use super::*;

fn entity(user: Option<Option<&str>>, client: Option<Option<&str>>) -> Entity {
    let name = |n: Option<&str>| n.map_or(EntityName::Default, |n| EntityName::Named(n.to_string()));
    Entity { user: user.map(name), client_id: client.map(name), ip: None }
}

fn table(entries: &[(Entity, f64)]) -> QuotaTable {
    entries.iter().map(|(e, v)| (e.clone(), [(QuotaKey::ProducerByteRate, *v)].into())).collect()
}

fn sensor(user: &str, client_id: &str) -> SensorKey {
    SensorKey { key: QuotaKey::ProducerByteRate, user: user.into(), client_id: client_id.into(), ip: None }
}

#[test]
fn the_most_specific_configured_level_applies_and_names_the_shared_sensor() {
    let levels = [
        (entity(Some(Some("alice")), Some(Some("app"))), 1.0),
        (entity(Some(Some("alice")), Some(None)), 2.0),
        (entity(Some(Some("alice")), None), 3.0),
        (entity(Some(None), Some(Some("app"))), 4.0),
        (entity(Some(None), Some(None)), 5.0),
        (entity(Some(None), None), 6.0),
        (entity(None, Some(Some("app"))), 7.0),
        (entity(None, Some(None)), 8.0),
    ];
    let want_sensors = [
        sensor("alice", "app"),
        sensor("alice", "app"),
        sensor("alice", ""),
        sensor("alice", "app"),
        sensor("alice", "app"),
        sensor("alice", ""),
        sensor("", "app"),
        sensor("", "app"),
    ];
    // Remove the levels one by one from the most specific: the next one applies each time.
    for first in 0..levels.len() {
        let t = table(&levels[first..]);
        let got = applicable(&t, QuotaKey::ProducerByteRate, "alice", "app");
        assert_eq!(got, Some(Applicable { bound: levels[first].1, sensor: want_sensors[first].clone() }), "level {}", first + 1);
    }
    assert_eq!(applicable(&table(&levels), QuotaKey::ConsumerByteRate, "alice", "app"), None, "another key");
    // Another user falls through alice's levels to the defaults.
    let got = applicable(&table(&levels), QuotaKey::ProducerByteRate, "bob", "app");
    assert_eq!(got.map(|a| a.bound), Some(4.0));
    assert_eq!(applicable(&QuotaTable::new(), QuotaKey::ProducerByteRate, "alice", "app"), None);
}

#[test]
fn entities_come_from_user_and_client_id_or_ip_components() {
    assert_eq!(Entity::from_components([("user", Some("alice")), ("client-id", None)]), Ok(entity(Some(Some("alice")), Some(None))));
    assert_eq!(Entity::from_components([("user", Some("a")), ("user", Some("b"))]), Err(InvalidQuota::DuplicateEntityType("user".into())));
    let ip =
        |name: Option<&str>| Entity { ip: Some(name.map_or(EntityName::Default, |n| EntityName::Named(n.into()))), ..Entity::default() };
    assert_eq!(Entity::from_components([("ip", Some("10.0.0.1"))]), Ok(ip(Some("10.0.0.1"))));
    // An IPv4 address written as IPv6-mapped is the address connections are counted by.
    assert_eq!(Entity::from_components([("ip", Some("::ffff:10.0.0.1"))]), Ok(ip(Some("10.0.0.1"))));
    assert_eq!(Entity::from_components([("ip", None)]), Ok(ip(None)));
    assert_eq!(Entity::from_components([("ip", Some("host.example"))]), Err(InvalidQuota::BadIp("host.example".into())));
    assert_eq!(Entity::from_components([("ip", Some("10.0.0.1")), ("user", Some("a"))]), Err(InvalidQuota::IpWithOthers));
    assert_eq!(Entity::from_components([("group", Some("g"))]), Err(InvalidQuota::UnknownEntityType("group".into())));
    assert_eq!(Entity::from_components([]), Err(InvalidQuota::EmptyEntity));
}

#[test]
fn keys_and_values_are_checked() {
    assert_eq!(QuotaKey::parse("producer_byte_rate"), Ok(QuotaKey::ProducerByteRate));
    assert_eq!(QuotaKey::parse("controller_mutation_rate"), Ok(QuotaKey::ControllerMutationRate));
    assert_eq!(QuotaKey::parse("nonsense"), Err(InvalidQuota::UnknownKey("nonsense".into())));
    let client = entity(None, Some(Some("app")));
    let address = Entity { ip: Some(EntityName::Default), ..Entity::default() };
    assert!(QuotaKey::ConsumerByteRate.validate(&client, 1024.0).is_ok());
    for bad in [0.0, -5.0, 1.5, f64::NAN, f64::INFINITY] {
        assert!(QuotaKey::ConsumerByteRate.validate(&client, bad).is_err(), "{bad}");
    }
    assert!(QuotaKey::ConnectionCreationRate.validate(&address, 10.0).is_ok());
    assert!(QuotaKey::RequestPercentage.validate(&client, 0.5).is_ok(), "a percentage need not be whole");
    assert!(QuotaKey::RequestPercentage.validate(&client, 0.0).is_err());
    assert_eq!(QuotaKey::ConnectionCreationRate.validate(&client, 10.0), Err(InvalidQuota::KeyNotForEntity("connection_creation_rate")));
    assert_eq!(QuotaKey::ProducerByteRate.validate(&address, 10.0), Err(InvalidQuota::KeyNotForEntity("producer_byte_rate")));
}

#[test]
fn an_address_gets_its_own_connection_rate_or_the_default_one_counted_apart() {
    let own: std::net::IpAddr = "10.0.0.1".parse().expect("address");
    let other: std::net::IpAddr = "10.0.0.2".parse().expect("address");
    let rate = |v: f64| -> std::collections::BTreeMap<QuotaKey, f64> { [(QuotaKey::ConnectionCreationRate, v)].into() };
    let table: QuotaTable = [
        (Entity { ip: Some(EntityName::Named("10.0.0.1".into())), ..Entity::default() }, rate(5.0)),
        (Entity { ip: Some(EntityName::Default), ..Entity::default() }, rate(1.0)),
    ]
    .into();
    let got = |ip| applicable_to_address(&table, ip).map(|a| (a.bound, a.sensor.ip));
    assert_eq!(got(own), Some((5.0, Some(own))));
    assert_eq!(got(other), Some((1.0, Some(other))));
    // The IPv6-mapped form of an address is the address.
    assert_eq!(got("::ffff:10.0.0.1".parse().expect("address")).map(|(b, _)| b), Some(5.0));
    assert_eq!(applicable_to_address(&QuotaTable::new(), own), None);
}

#[test]
fn filters_match_exact_default_and_any_name_strictly_or_not() {
    let alice = entity(Some(Some("alice")), None);
    let alice_app = entity(Some(Some("alice")), Some(Some("app")));
    let default_user = entity(Some(None), None);
    let app = entity(None, Some(Some("app")));
    let filter = |c: &[(&str, i8, Option<&str>)], strict| QuotaFilter::parse(c.iter().copied(), strict).expect("valid filter");
    let matched = |f: &QuotaFilter| [&alice, &alice_app, &default_user, &app].iter().filter(|e| f.matches(e)).count();

    let exact_alice = filter(&[("user", 0, Some("alice"))], false);
    assert!(exact_alice.matches(&alice) && exact_alice.matches(&alice_app) && !exact_alice.matches(&default_user));
    assert!(!filter(&[("user", 0, Some("alice"))], true).matches(&alice_app), "strict: no client-id component");
    assert_eq!(matched(&filter(&[("user", 1, None)], false)), 1);
    assert_eq!(matched(&filter(&[("user", 2, None)], false)), 2);
    assert_eq!(matched(&filter(&[("client-id", 2, None)], true)), 1);
    assert_eq!(matched(&filter(&[], false)), 4, "an empty filter matches everything");
    assert_eq!(matched(&filter(&[("ip", 2, None)], false)), 0, "no ip entity here");

    assert_eq!(QuotaFilter::parse([("user", 0, None)], false), Err(InvalidQuota::MissingMatch("user".into())));
    assert_eq!(QuotaFilter::parse([("user", 7, None)], false), Err(InvalidQuota::UnknownMatchType(7)));
    assert_eq!(QuotaFilter::parse([("user", 1, None), ("user", 2, None)], false), Err(InvalidQuota::DuplicateEntityType("user".into())));
}
