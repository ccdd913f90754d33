//! The Kafka listener's security flags (Kafka's `security.protocol`, `ssl.*`, `sasl.*`,
//! `authorizer.class.name`, `super.users`), each with a `KAAS_*` environment variable, collected
//! into a [`ListenerSecurity`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use kaas_broker::authz::{AuthzSettings, Policy};
use kaas_broker::config::ListenerSecurity;
use kaas_broker::sasl::credentials::CredentialStore;
use kaas_broker::sasl::jwks_endpoint::JwksEndpoint;
use kaas_broker::sasl::oauthbearer::{JwksSource, OAuthBearer, OAuthSettings};
use kaas_broker::sasl::{Mechanism, SaslSettings};
use kaas_broker::tls::principal::PrincipalMapper;
use kaas_broker::tls::{ClientAuth, TlsReloader, TlsSettings};

/// Kafka's listener security protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

/// `authorizer.class.name`: none, or Kafka's StandardAuthorizer (ACLs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum AuthorizerFlag {
    None,
    Standard,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ClientAuthFlag {
    None,
    Requested,
    Required,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct SecurityFlags {
    /// security.protocol of the Kafka listener: PLAINTEXT, SSL (TLS), SASL_PLAINTEXT or SASL_SSL.
    #[arg(long, env = "KAAS_SECURITY_PROTOCOL", value_enum, default_value = "PLAINTEXT")]
    security_protocol: SecurityProtocol,
    /// SSL: the listener's PEM certificate chain, leaf first (a Secret's tls.crt); read again
    /// when it changes.
    #[arg(long, env = "KAAS_SSL_CERTIFICATE")]
    ssl_certificate: Option<PathBuf>,
    /// SSL: the PEM private key of the certificate (tls.key).
    #[arg(long, env = "KAAS_SSL_KEY")]
    ssl_key: Option<PathBuf>,
    /// SSL: PEM CA bundle that client certificates must chain to (ca.crt).
    #[arg(long, env = "KAAS_SSL_TRUSTSTORE")]
    ssl_truststore: Option<PathBuf>,
    /// ssl.client.auth: whether clients must present a certificate (mTLS).
    #[arg(long, env = "KAAS_SSL_CLIENT_AUTH", value_enum, default_value = "none")]
    ssl_client_auth: ClientAuthFlag,
    /// ssl.principal.mapping.rules: how a client certificate's subject (as Java prints it, e.g.
    /// `CN=alice,OU=eng,O=Example`) becomes the user ACLs and quotas see: `DEFAULT` (the name
    /// itself) or `RULE:pattern/replacement/[LU]`, comma-separated, first match wins.
    #[arg(long, env = "KAAS_SSL_PRINCIPAL_MAPPING_RULES", default_value = "DEFAULT")]
    ssl_principal_mapping_rules: String,
    /// sasl.enabled.mechanisms: any of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.
    #[arg(long, env = "KAAS_SASL_ENABLED_MECHANISMS", value_delimiter = ',', default_value = "SCRAM-SHA-512")]
    sasl_enabled_mechanisms: Vec<String>,
    /// SASL: the users' salted credentials (a JSON file, made with `kaas scram-credential`);
    /// read again when it changes. In a cluster, its KafkaUsers are users too (and win where
    /// both name one), and the file is optional.
    #[arg(long, env = "KAAS_SASL_CREDENTIALS")]
    sasl_credentials: Option<PathBuf>,
    /// OAUTHBEARER: the JSON Web Key Set that signs tokens (sasl.oauthbearer.jwks.endpoint.url):
    /// an identity provider's https:// endpoint (fetched again every
    /// --sasl-oauthbearer-jwks-endpoint-refresh-ms, and early when a token names a key it does
    /// not have), or a file (a mounted Secret or ConfigMap; a path or file:// URL) read again
    /// when it changes.
    #[arg(long, env = "KAAS_SASL_OAUTHBEARER_JWKS")]
    sasl_oauthbearer_jwks: Option<String>,
    /// OAUTHBEARER: how often the key set endpoint is fetched again
    /// (sasl.oauthbearer.jwks.endpoint.refresh.ms).
    #[arg(long, env = "KAAS_SASL_OAUTHBEARER_JWKS_ENDPOINT_REFRESH_MS", default_value_t = 3_600_000, value_parser = clap::value_parser!(u64).range(1_000..))]
    sasl_oauthbearer_jwks_endpoint_refresh_ms: u64,
    /// OAUTHBEARER: PEM certificates that sign the key set endpoint's certificate (a private
    /// identity provider's CA); without it, the system's CA certificates.
    #[arg(long, env = "KAAS_SASL_OAUTHBEARER_JWKS_ENDPOINT_CA")]
    sasl_oauthbearer_jwks_endpoint_ca: Option<PathBuf>,
    /// OAUTHBEARER: tokens must name one of these audiences in `aud`
    /// (sasl.oauthbearer.expected.audience; comma-separated).
    #[arg(long, env = "KAAS_SASL_OAUTHBEARER_EXPECTED_AUDIENCE", value_delimiter = ',')]
    sasl_oauthbearer_expected_audience: Vec<String>,
    /// OAUTHBEARER: tokens must have this `iss` (sasl.oauthbearer.expected.issuer).
    #[arg(long, env = "KAAS_SASL_OAUTHBEARER_EXPECTED_ISSUER")]
    sasl_oauthbearer_expected_issuer: Option<String>,
    /// OAUTHBEARER: the claim that names the user (sasl.oauthbearer.sub.claim.name).
    #[arg(long, env = "KAAS_SASL_OAUTHBEARER_SUB_CLAIM_NAME", default_value = "sub")]
    sasl_oauthbearer_sub_claim_name: String,
    /// OAUTHBEARER: leeway for exp, nbf and iat (sasl.oauthbearer.clock.skew.buffer.seconds).
    #[arg(long, env = "KAAS_SASL_OAUTHBEARER_CLOCK_SKEW_BUFFER_SECONDS", default_value_t = 30)]
    sasl_oauthbearer_clock_skew_buffer_seconds: u64,
    /// OAUTHBEARER: accept unsigned (`alg: none`) tokens, as Kafka's default validator does —
    /// anyone can then log in as anyone; for development only.
    #[arg(long, env = "KAAS_SASL_OAUTHBEARER_ALLOW_UNSECURED", default_value_t = false, action = clap::ArgAction::Set)]
    sasl_oauthbearer_allow_unsecured: bool,
    /// connections.max.reauth.ms: SASL sessions last this long, then the client must
    /// re-authenticate (KIP-368); 0: they do not expire.
    #[arg(long, env = "KAAS_CONNECTIONS_MAX_REAUTH_MS", default_value_t = 0)]
    connections_max_reauth_ms: u64,
    /// authorizer.class.name: `standard` checks every request against ACLs (kept in
    /// `__cluster/acls.json` on the data volume, managed with CreateAcls/DeleteAcls, e.g.
    /// kafka-acls; in a cluster the controller writes them); `none` allows everything.
    #[arg(long, env = "KAAS_AUTHORIZER", value_enum, default_value = "none")]
    authorizer: AuthorizerFlag,
    /// super.users: principals allowed everything, `User:<name>` separated by `;` (as Kafka
    /// writes them) or `,` (a comma inside a certificate's name, `User:CN=a,O=b`, is part of it).
    #[arg(long, env = "KAAS_SUPER_USERS", default_value = "")]
    super_users: String,
    /// allow.everyone.if.no.acl.found: allow a request on a resource no ACL names.
    #[arg(long, env = "KAAS_ALLOW_EVERYONE_IF_NO_ACL_FOUND", default_value_t = false, action = clap::ArgAction::Set)]
    allow_everyone_if_no_acl_found: bool,
    /// The most ACLs the broker keeps (CreateAcls beyond it is refused).
    #[arg(long, env = "KAAS_MAX_ACLS", default_value_t = 10_000)]
    max_acls: usize,
}

impl SecurityFlags {
    /// Loads the certificate and credentials the protocol needs; a missing or unreadable one
    /// stops the broker with a message naming the flag. In a cluster (`cluster`) SCRAM users may
    /// all be KafkaUsers, so the credentials file is optional there.
    pub(crate) fn listener_security(&self, cluster: bool) -> anyhow::Result<ListenerSecurity> {
        use SecurityProtocol as P;
        let tls = match self.security_protocol {
            P::Ssl | P::SaslSsl => Some(Arc::new(self.tls()?)),
            P::Plaintext | P::SaslPlaintext => None,
        };
        let sasl = match self.security_protocol {
            P::SaslPlaintext | P::SaslSsl => Some(self.sasl(cluster)?),
            P::Plaintext | P::Ssl => None,
        };
        Ok(ListenerSecurity { tls, sasl, authorizer: self.authorizer()? })
    }

    fn authorizer(&self) -> anyhow::Result<Option<AuthzSettings>> {
        if self.authorizer == AuthorizerFlag::None {
            return Ok(None);
        }
        let mut super_users = Vec::new();
        for principal in principals(&self.super_users) {
            match principal.split_once(':') {
                Some(("User", name)) if !name.is_empty() => super_users.push(name.to_string()),
                _ => bail!("--super-users: {principal:?} is not of the form User:<name>"),
            }
        }
        let policy = Policy { super_users, allow_if_no_acl: self.allow_everyone_if_no_acl_found };
        Ok(Some(AuthzSettings { policy, max_acls: self.max_acls }))
    }

    fn tls(&self) -> anyhow::Result<TlsReloader> {
        let (Some(cert), Some(key)) = (&self.ssl_certificate, &self.ssl_key) else {
            bail!("--security-protocol {:?} needs --ssl-certificate and --ssl-key", self.security_protocol);
        };
        let client_auth = match self.ssl_client_auth {
            ClientAuthFlag::None => ClientAuth::None,
            ClientAuthFlag::Requested => ClientAuth::Requested,
            ClientAuthFlag::Required => ClientAuth::Required,
        };
        let settings = TlsSettings { cert: cert.clone(), key: key.clone(), client_ca: self.ssl_truststore.clone(), client_auth };
        let principals = PrincipalMapper::parse(&self.ssl_principal_mapping_rules).context("--ssl-principal-mapping-rules")?;
        Ok(TlsReloader::new(settings).context("loading the TLS certificate")?.with_principal_mapper(principals))
    }

    fn sasl(&self, cluster: bool) -> anyhow::Result<SaslSettings> {
        let mut mechanisms = Vec::new();
        for name in &self.sasl_enabled_mechanisms {
            match Mechanism::parse(name.trim()) {
                Some(m) => mechanisms.push(m),
                None => bail!("--sasl-enabled-mechanisms: {name:?} is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"),
            }
        }
        if mechanisms.is_empty() {
            bail!("--sasl-enabled-mechanisms is empty");
        }
        let oauth_only = mechanisms.iter().all(|m| *m == Mechanism::OAuthBearer);
        let credentials = match &self.sasl_credentials {
            Some(path) => {
                Some(Arc::new(CredentialStore::open(path.clone()).map_err(anyhow::Error::msg).context("loading the SASL credentials")?))
            }
            None if oauth_only => None,
            // The cluster's KafkaUsers, read from the volume.
            None if cluster => Some(Arc::new(CredentialStore::managed_only())),
            None => {
                bail!("--security-protocol {:?} needs --sasl-credentials (make one with `kaas scram-credential`)", self.security_protocol)
            }
        };
        let oauth = match mechanisms.contains(&Mechanism::OAuthBearer) {
            true => Some(Arc::new(self.oauth()?)),
            false => None,
        };
        let reauth = (self.connections_max_reauth_ms > 0).then(|| Duration::from_millis(self.connections_max_reauth_ms));
        Ok(SaslSettings { mechanisms, credentials, oauth, reauth })
    }

    fn oauth(&self) -> anyhow::Result<OAuthBearer> {
        let jwks = self.sasl_oauthbearer_jwks.as_deref().map(|url| {
            if url.starts_with("https://") || url.starts_with("http://") {
                JwksSource::Endpoint(JwksEndpoint {
                    url: url.to_owned(),
                    refresh: Duration::from_millis(self.sasl_oauthbearer_jwks_endpoint_refresh_ms),
                    ca: self.sasl_oauthbearer_jwks_endpoint_ca.clone(),
                })
            } else {
                JwksSource::File(PathBuf::from(url.strip_prefix("file://").unwrap_or(url)))
            }
        });
        let settings = OAuthSettings {
            jwks,
            expected_audience: self
                .sasl_oauthbearer_expected_audience
                .iter()
                .map(|a| a.trim().to_owned())
                .filter(|a| !a.is_empty())
                .collect(),
            expected_issuer: self.sasl_oauthbearer_expected_issuer.clone(),
            sub_claim: self.sasl_oauthbearer_sub_claim_name.clone(),
            clock_skew: Duration::from_secs(self.sasl_oauthbearer_clock_skew_buffer_seconds),
            allow_unsecured: self.sasl_oauthbearer_allow_unsecured,
        };
        OAuthBearer::new(settings).context("--sasl-oauthbearer-jwks (or --sasl-oauthbearer-allow-unsecured true)")
    }
}

/// The principals of a `super.users` list: separated by `;`, or by a `,` that starts another
/// `User:` (other commas belong to a certificate's distinguished name).
fn principals(list: &str) -> Vec<&str> {
    list.split(';')
        .flat_map(|part| {
            let starts = part.match_indices(',').map(|(i, _)| i).filter(|&i| part[i + 1..].trim_start().starts_with("User:"));
            let mut pieces = Vec::new();
            let mut from = 0;
            for at in starts {
                pieces.push(&part[from..at]);
                from = at + 1;
            }
            pieces.push(&part[from..]);
            pieces
        })
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::principals;

    #[test]
    fn super_users_split_between_principals_only() {
        assert_eq!(principals("User:a;User:b, User:c"), ["User:a", "User:b", "User:c"]);
        assert_eq!(principals("User:CN=carol,OU=ops;User:admin"), ["User:CN=carol,OU=ops", "User:admin"]);
        assert_eq!(principals("User:admin,User:CN=x,O=y"), ["User:admin", "User:CN=x,O=y"]);
        assert!(principals(" ; ").is_empty());
    }
}
