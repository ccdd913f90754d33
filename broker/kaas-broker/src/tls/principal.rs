//! Who a client certificate names: the subject's distinguished name as Java prints it
//! (`X500Principal.getName()`, RFC 2253), mapped by `ssl.principal.mapping.rules` to the user
//! name ACLs and quotas see — Kafka's `DefaultKafkaPrincipalBuilder` with its
//! `SslPrincipalMapper`, so rules written for Kafka give the same names here.

use std::fmt::Write as _;

use regex::Regex;
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::{AttributeTypeAndValue, X509Name};

/// Why the mapping rules cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("invalid rule: `{0}`")]
    Invalid(String),
    #[error("invalid rule: `{rule}`: {why}")]
    Pattern { rule: String, why: String },
}

/// Why a certificate gives no principal.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrincipalError {
    #[error("the client certificate is not valid X.509: {0}")]
    Certificate(String),
    #[error("no ssl.principal.mapping.rules apply to {0}")]
    NoMatchingRule(String),
}

/// `ssl.principal.mapping.rules`: tried in order, the first that applies names the user.
#[derive(Debug, Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

#[derive(Debug, Clone)]
enum Rule {
    /// The distinguished name itself.
    Default,
    /// `RULE:pattern/replacement/[LU]`: applies when the pattern matches the whole name
    /// (`whole` is the pattern anchored at both ends, as Java's `Matcher.matches()` tries it).
    Replace { whole: Regex, pattern: Regex, replacement: String, case: Case },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

impl Default for PrincipalMapper {
    /// Kafka's default, `DEFAULT`: the distinguished name is the user name.
    fn default() -> PrincipalMapper {
        PrincipalMapper { rules: vec![Rule::Default] }
    }
}

impl PrincipalMapper {
    /// Parses rules as Kafka writes them: `DEFAULT` or `RULE:pattern/replacement/` with an
    /// optional `L` or `U` after the last slash, separated by commas; `\` escapes a `/` (or
    /// anything else) inside a pattern or replacement.
    pub fn parse(text: &str) -> Result<PrincipalMapper, RuleError> {
        let rules = split_rules(text)?.into_iter().map(parse_rule).collect::<Result<Vec<_>, _>>()?;
        Ok(PrincipalMapper { rules: rules.into_iter().flatten().collect() })
    }

    /// The user a distinguished name maps to.
    pub fn map(&self, dn: &str) -> Result<String, PrincipalError> {
        self.rules.iter().find_map(|rule| rule.apply(dn)).ok_or_else(|| PrincipalError::NoMatchingRule(dn.to_owned()))
    }

    /// The user a client certificate (DER) names.
    pub fn user_of(&self, certificate: &[u8]) -> Result<String, PrincipalError> {
        let (_, cert) = X509Certificate::from_der(certificate).map_err(|e| PrincipalError::Certificate(e.to_string()))?;
        self.map(&distinguished_name(cert.subject()))
    }
}

impl Rule {
    fn apply(&self, dn: &str) -> Option<String> {
        let Rule::Replace { whole, pattern, replacement, case } = self else { return Some(dn.to_owned()) };
        if !whole.is_match(dn) {
            return None;
        }
        // Java's `replaceAll`, as Kafka applies it once the whole name matched.
        let mapped = pattern.replace_all(dn, replacement.as_str()).into_owned();
        Some(match case {
            Case::Keep => mapped,
            Case::Lower => mapped.to_lowercase(),
            Case::Upper => mapped.to_uppercase(),
        })
    }
}

/// Splits the rule list at the commas between rules (a comma inside a pattern belongs to it).
fn split_rules(text: &str) -> Result<Vec<String>, RuleError> {
    let mut rules = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (rule, after) = if let Some(body) = rest.strip_prefix("RULE:") {
            // Two slash-terminated parts, then flags up to the next comma.
            let mut end = 0;
            for _ in 0..2 {
                end += slash_terminated(&body[end..]).ok_or_else(|| RuleError::Invalid(rest.to_owned()))?;
            }
            let flags_end = body[end..].find(',').map_or(body.len(), |i| end + i);
            ("RULE:".len() + flags_end, &body[flags_end..])
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            (end, &rest[end..])
        };
        rules.push(rest[..rule].trim().to_owned());
        rest = after.strip_prefix(',').unwrap_or(after).trim_start();
    }
    Ok(rules)
}

/// The length of `s` up to and including its first unescaped `/`.
fn slash_terminated(s: &str) -> Option<usize> {
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '/' => return Some(i + 1),
            _ => {}
        }
    }
    None
}

fn parse_rule(rule: String) -> Result<Option<Rule>, RuleError> {
    if rule.is_empty() {
        return Ok(None); // Kafka ignores empty rules
    }
    if rule == "DEFAULT" {
        return Ok(Some(Rule::Default));
    }
    let body = rule.strip_prefix("RULE:").ok_or_else(|| RuleError::Invalid(rule.clone()))?;
    let pattern_end = slash_terminated(body).ok_or_else(|| RuleError::Invalid(rule.clone()))?;
    let replacement_end = pattern_end + slash_terminated(&body[pattern_end..]).ok_or_else(|| RuleError::Invalid(rule.clone()))?;
    let case = match &body[replacement_end..] {
        "" => Case::Keep,
        "L" => Case::Lower,
        "U" => Case::Upper,
        other => return Err(RuleError::Pattern { rule: rule.clone(), why: format!("unmatched substring `{other}`") }),
    };
    let source = &body[..pattern_end - 1];
    let compile = |source: &str| Regex::new(source).map_err(|e| RuleError::Pattern { rule: rule.clone(), why: e.to_string() });
    let pattern = compile(source)?;
    let whole = compile(&format!("^(?:{source})$"))?;
    let replacement = java_replacement(&body[pattern_end..replacement_end - 1], pattern.captures_len() - 1);
    Ok(Some(Rule::Replace { whole, pattern, replacement, case }))
}

/// A Java `replaceAll` replacement as the `regex` crate's: `$n` refers to group n (the longest
/// number of digits that names a group; a reference past the last group is literal text, as
/// Kafka makes it), `\x` is a literal x, and a literal `$` is written `$$`.
fn java_replacement(java: &str, groups: usize) -> String {
    let mut out = String::new();
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') | None => out.push_str("$$"),
                Some(other) => out.push(other),
            },
            '$' => match chars.peek().and_then(|d| d.to_digit(10)) {
                // Java reads the first digit, then more while they still name a group.
                Some(first) if usize::try_from(first).is_ok_and(|n| n <= groups) => {
                    chars.next();
                    let mut n = first as usize;
                    while let Some(more) = chars.peek().and_then(|d| d.to_digit(10)).map(|d| n * 10 + d as usize).filter(|m| *m <= groups) {
                        n = more;
                        chars.next();
                    }
                    let _ = write!(out, "${{{n}}}");
                }
                // No such group: literal text, as Kafka escapes it.
                _ => out.push_str("$$"),
            },
            other => out.push(other),
        }
    }
    out
}

/// The name as Java's `X500Principal.getName()` prints it (RFC 2253): the most specific RDN
/// first, RDNs joined by `,`, the attributes of one RDN by `+`, Java's keywords for the common
/// attribute types and the dotted OID with the hex DER value for the rest.
pub fn distinguished_name(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name.iter().map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+")).collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

fn attribute(atv: &AttributeTypeAndValue<'_>) -> String {
    let oid = atv.attr_type().to_id_string();
    let keyword = match oid.as_str() {
        "2.5.4.3" => Some("CN"),
        "2.5.4.6" => Some("C"),
        "2.5.4.7" => Some("L"),
        "2.5.4.8" => Some("ST"),
        "2.5.4.9" => Some("STREET"),
        "2.5.4.10" => Some("O"),
        "2.5.4.11" => Some("OU"),
        "0.9.2342.19200300.100.1.25" => Some("DC"),
        "0.9.2342.19200300.100.1.1" => Some("UID"),
        _ => None,
    };
    match (keyword, atv.as_str()) {
        (Some(keyword), Ok(value)) => format!("{keyword}={}", escape(value)),
        _ => format!("{oid}=#{}", hex_der(atv)),
    }
}

/// RFC 2253 escaping as Java does it: `,+"\<>;` anywhere, `#` or a space first, a space last.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special =
            matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';') || (i == 0 && matches!(c, '#' | ' ')) || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The attribute value's whole DER encoding (tag, length, contents), in lower-case hex.
fn hex_der(atv: &AttributeTypeAndValue<'_>) -> String {
    let value = atv.attr_value();
    let data = value.data;
    let mut der = vec![u8::try_from(value.header.tag().0).unwrap_or(0x04)];
    match u8::try_from(data.len()) {
        Ok(n) if n < 0x80 => der.push(n),
        _ => {
            let len = data.len().to_be_bytes();
            let significant: Vec<u8> = len.iter().copied().skip_while(|b| *b == 0).collect();
            der.push(0x80 | u8::try_from(significant.len()).unwrap_or(0));
            der.extend(significant);
        }
    }
    der.extend_from_slice(data);
    der.iter().fold(String::with_capacity(der.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
#[path = "principal_tests.rs"]
mod tests;
