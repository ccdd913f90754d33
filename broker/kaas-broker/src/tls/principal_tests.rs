#![allow(clippy::unwrap_used)]

use rcgen::{CertificateParams, DnType, KeyPair};

use super::*;

/// Kafka's documented example rules (`ssl.principal.mapping.rules` in its security docs).
const KAFKA_EXAMPLE: &str = r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT";

#[test]
fn kafkas_documented_rules_give_kafkas_names() {
    let mapper = PrincipalMapper::parse(KAFKA_EXAMPLE).unwrap();
    for (dn, user) in [
        ("CN=duke,OU=ServiceUsers,O=Org,L=City,ST=State,C=XX", "duke"),
        ("CN=adminUser,OU=Admin,O=Org,L=City,ST=State,C=XX", "adminuser@admin"),
        ("CN=kafka1.example.com,O=Org", "kafka1.example.com"),
        ("OU=JavaSoft,O=Sun Microsystems", "OU=JavaSoft,O=Sun Microsystems"),
    ] {
        assert_eq!(mapper.map(dn).unwrap(), user, "{dn}");
    }
}

#[test]
fn rules_are_parsed_as_kafka_parses_them() {
    // A comma inside a pattern belongs to it; spaces around rules are dropped; an escaped slash
    // is part of the pattern; U upper-cases.
    let mapper = PrincipalMapper::parse(" RULE:^CN=([^,]*),O=a\\/b$/$1/U , DEFAULT ").unwrap();
    assert_eq!(mapper.map("CN=svc,O=a/b").unwrap(), "SVC");
    assert_eq!(mapper.map("CN=svc,O=c").unwrap(), "CN=svc,O=c");
    // Only the whole name counts, as with Java's matches().
    let only = PrincipalMapper::parse("RULE:CN=([a-z]+)/$1/").unwrap();
    assert_eq!(only.map("CN=abc").unwrap(), "abc");
    assert_eq!(only.map("CN=abc,O=x").unwrap_err(), PrincipalError::NoMatchingRule("CN=abc,O=x".into()));
    // An alternation whose first branch matches only a prefix still matches the whole name;
    // the replacement then works as Java's replaceAll does (leftmost branch first).
    let alternation = PrincipalMapper::parse("RULE:CN=a|CN=ab/x/").unwrap();
    assert_eq!(alternation.map("CN=ab").unwrap(), "xb");
    for bad in ["RULE:^CN=(.*)$", "RULE:^CN=(.*)$/$1/X", "CN=x", "RULE:^CN=((.*$/$1/"] {
        assert!(PrincipalMapper::parse(bad).is_err(), "{bad} was accepted");
    }
    assert_eq!(PrincipalMapper::parse("").unwrap().map("CN=x").unwrap_err(), PrincipalError::NoMatchingRule("CN=x".into()));
}

#[test]
fn replacements_refer_to_groups_as_java_does() {
    // $12 names group 12 only when there is one; a reference past the last group is literal;
    // \$ is a dollar sign.
    assert_eq!(java_replacement("$1@$2", 2), "${1}@${2}");
    assert_eq!(java_replacement("$12", 1), "${1}2");
    assert_eq!(java_replacement("$4-$1", 3), "$$4-${1}");
    assert_eq!(java_replacement("\\$1 $0", 1), "$$1 ${0}");
    let mapper = PrincipalMapper::parse("RULE:^CN=(.*?),OU=(.*?)$/$2\\/$1\\$/").unwrap();
    assert_eq!(mapper.map("CN=alice,OU=eng").unwrap(), "eng/alice$");
}

fn certificate(dn: &[(DnType, &str)]) -> Vec<u8> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    for (kind, value) in dn {
        params.distinguished_name.push(kind.clone(), *value);
    }
    params.self_signed(&KeyPair::generate().unwrap()).unwrap().der().to_vec()
}

#[test]
fn a_certificate_names_its_subject_as_java_prints_it() {
    let der = certificate(&[
        (DnType::CountryName, "XX"),
        (DnType::OrganizationName, "Example, Inc."),
        (DnType::OrganizationalUnitName, "eng"),
        (DnType::CommonName, "alice"),
    ]);
    let default = PrincipalMapper::default();
    assert_eq!(default.user_of(&der).unwrap(), r"CN=alice,OU=eng,O=Example\, Inc.,C=XX");
    let mapper = PrincipalMapper::parse(r"RULE:^CN=([^,]*),OU=eng,.*$/$1/,DEFAULT").unwrap();
    assert_eq!(mapper.user_of(&der).unwrap(), "alice");
    assert!(matches!(default.user_of(b"not a certificate"), Err(PrincipalError::Certificate(_))));
}

#[test]
fn values_are_escaped_and_unnamed_types_printed_as_hex() {
    assert_eq!(escape(r#"a,b+c"d\e<f>g;h"#), r#"a\,b\+c\"d\\e\<f\>g\;h"#);
    assert_eq!(escape("#lead and trail "), r"\#lead and trail\ ");
    assert_eq!(escape(" "), r"\ ");
    // emailAddress has no keyword in RFC 2253: Java prints its OID and DER value.
    let der = certificate(&[(DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]), "a@b"), (DnType::CommonName, "x")]);
    let name = PrincipalMapper::default().user_of(&der).unwrap();
    assert!(name.starts_with("CN=x,1.2.840.113549.1.9.1=#0c03614062"), "{name}");
}
