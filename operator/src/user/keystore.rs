//! The PKCS#12 keystore in a `tls` user's Secret (`user.p12`, Strimzi's key): the user's key and
//! certificate, with the clients CA's certificate as the rest of the chain, for Java clients
//! (`ssl.keystore.type=PKCS12`), which cannot read the PEM keys.
//!
//! Written by `p12-keystore` with the algorithms Java's own keystore writes since 8u301, 11.0.12
//! and 17 — PBES2 (PBKDF2-HMAC-SHA256, AES-256-CBC) for the key and the certificates, an
//! HMAC-SHA256 MAC — rather than the SHA-1, RC2 and 3DES of older PKCS#12 files.

use p12_keystore::{
    Certificate, EncryptionAlgorithm, KeyStore, KeyStoreEntry, MacAlgorithm, PrivateKey,
    PrivateKeyChain,
};
use sha2::{Digest, Sha256};

use crate::certificates::Pem;

/// PBKDF2 iterations of the encryption and MAC keys: Java's default
/// (`keystore.pkcs12.*IterationCount`).
pub const ITERATIONS: u32 = 10_000;

/// Why a keystore could not be made.
#[derive(Debug, thiserror::Error)]
pub enum KeystoreError {
    /// An input is not the PEM block it must be.
    #[error("cannot make the user's PKCS#12 keystore: its {what} is not a PEM {label}")]
    NotPem {
        /// Which input.
        what: &'static str,
        /// The PEM label it must have.
        label: &'static str,
    },
    /// The PKCS#12 library refused an input, or could not write the file.
    #[error("cannot make the user's PKCS#12 keystore ({what}): {source}")]
    Pkcs12 {
        /// What it was doing.
        what: &'static str,
        /// The library's error.
        #[source]
        source: p12_keystore::error::Error,
    },
}

fn failed(what: &'static str) -> impl FnOnce(p12_keystore::error::Error) -> KeystoreError {
    move |source| KeystoreError::Pkcs12 { what, source }
}

/// The DER contents of the first PEM block of `pem`, which must be labelled `label`.
fn der(pem: &str, label: &'static str, what: &'static str) -> Result<Vec<u8>, KeystoreError> {
    match x509_parser::pem::parse_x509_pem(pem.as_bytes()) {
        Ok((_, block)) if block.label == label => Ok(block.contents),
        _ => Err(KeystoreError::NotPem { what, label }),
    }
}

/// A PKCS#12 file holding one private key entry named `alias`: `certificate`'s PKCS#8 key and
/// its certificate, chained to `ca_cert` (PEM), encrypted and MACed under `password`.
pub fn pkcs12(
    alias: &str,
    certificate: &Pem,
    ca_cert: &str,
    password: &str,
) -> Result<Vec<u8>, KeystoreError> {
    let leaf = der(&certificate.cert, "CERTIFICATE", "certificate")?;
    let leaf = Certificate::from_der(&leaf).map_err(failed("certificate"))?;
    let ca = der(ca_cert, "CERTIFICATE", "CA certificate")?;
    let ca = Certificate::from_der(&ca).map_err(failed("CA certificate"))?;
    let key = der(&certificate.key, "PRIVATE KEY", "key")?;
    let key = PrivateKey::from_der(&key).map_err(failed("key"))?;
    // The localKeyId pairs the key with its certificate in the file (Java matches them by it):
    // the certificate's digest, unique to each certificate issued.
    let local_key_id = Sha256::digest(leaf.as_der()).to_vec();
    let mut store = KeyStore::new();
    store.add_entry(
        alias,
        KeyStoreEntry::PrivateKeyChain(PrivateKeyChain::new(local_key_id, key, [leaf, ca])),
    );
    // Named, not the library's defaults: what Java reads is part of the Secret's contract.
    store
        .writer(password)
        .encryption_algorithm(EncryptionAlgorithm::PbeWithHmacSha256AndAes256)
        .encryption_iterations(ITERATIONS)
        .mac_algorithm(MacAlgorithm::HmacSha256)
        .mac_iterations(ITERATIONS)
        .write()
        .map_err(failed("writing"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::path::PathBuf;
    use std::process::Command;

    use p12_keystore::Pkcs12ImportPolicy;
    use time::OffsetDateTime;

    use super::*;
    use crate::certificates::{self, Ca};
    use crate::resources::Names;

    fn issued(user: &str) -> (Pem, Pem) {
        let names = Names {
            cluster: "kc".into(),
            namespace: "ns".into(),
        };
        let now = OffsetDateTime::now_utc();
        let ca = certificates::issue_ca(Ca::Clients, &names, 365, now).unwrap();
        let signing = certificates::SigningCa::parse(&ca.cert, &ca.key).unwrap();
        let (cert, _) = certificates::issue_user(&signing, user, now).unwrap();
        (ca, cert)
    }

    /// Java's `keytool`: on PATH, else in a JDK Debian installs. Missing is a failure, not a
    /// skip: Java is the reader the keystore is made for.
    fn keytool() -> PathBuf {
        let on_path = std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
            .unwrap_or_default()
            .into_iter()
            .map(|dir| dir.join("keytool"));
        let in_jdks = std::fs::read_dir("/usr/lib/jvm")
            .into_iter()
            .flatten()
            .flatten()
            .map(|jdk| jdk.path().join("bin/keytool"));
        on_path.chain(in_jdks).find(|p| p.is_file()).unwrap_or_else(|| {
            panic!(
                "keytool not found on PATH or under /usr/lib/jvm: install a JDK (Debian: openjdk-17-jre-headless, as scripts/install-deps.sh does) to check user.p12 with Java"
            )
        })
    }

    /// Java 17's keytool reads the keystore with its password: one PrivateKeyEntry, the user's
    /// certificate chained to the clients CA.
    #[test]
    fn java_reads_the_keystore_as_a_private_key_entry_of_the_user() {
        let (ca, cert) = issued("bob");
        let password = crate::user::generate_password().unwrap();
        let p12 = pkcs12("bob", &cert, &ca.cert, &password).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("user.p12");
        std::fs::write(&file, &p12).unwrap();

        let keytool = keytool();
        let output = Command::new(&keytool)
            .args(["-list", "-v", "-storetype", "PKCS12", "-keystore"])
            .arg(&file)
            .args(["-storepass", password.as_str()])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", keytool.display()));
        let listing = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "keytool failed ({}):\n{listing}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            listing.contains("Your keystore contains 1 entry"),
            "{listing}"
        );
        assert!(listing.contains("Alias name: bob"), "{listing}");
        assert!(listing.contains("Entry type: PrivateKeyEntry"), "{listing}");
        assert!(listing.contains("Certificate chain length: 2"), "{listing}");
        assert!(listing.contains("Owner: CN=bob\n"), "{listing}");

        let wrong = Command::new(&keytool)
            .args(["-list", "-storetype", "PKCS12", "-keystore"])
            .arg(&file)
            .args(["-storepass", "not-the-password"])
            .output()
            .unwrap();
        assert!(
            !wrong.status.success(),
            "keytool read it without the password"
        );
    }

    /// Read back, the keystore holds exactly the issued key and certificate, then the CA's.
    #[test]
    fn the_keystore_holds_the_issued_key_and_certificate_chained_to_the_ca() {
        let (ca, cert) = issued("alice");
        let p12 = pkcs12("alice", &cert, &ca.cert, "pw").unwrap();
        let store = KeyStore::from_pkcs12(&p12, "pw", Pkcs12ImportPolicy::Strict).unwrap();
        assert_eq!(store.entries_len(), 1);
        let (alias, chain) = store.private_key_chain().unwrap();
        assert_eq!(alias, "alice");
        assert_eq!(
            chain.key().as_der(),
            der(&cert.key, "PRIVATE KEY", "key").unwrap()
        );
        let certs: Vec<&[u8]> = chain.certs().iter().map(|c| c.as_der()).collect();
        assert_eq!(
            certs,
            [
                der(&cert.cert, "CERTIFICATE", "certificate").unwrap(),
                der(&ca.cert, "CERTIFICATE", "CA").unwrap()
            ]
        );
        assert_eq!(chain.certs()[0].subject(), "CN=alice");
        // The key is the certificate's: rcgen reads the pair back as one.
        let key = rcgen::KeyPair::try_from(chain.key().as_der()).unwrap();
        let (_, parsed) = x509_parser::parse_x509_certificate(chain.certs()[0].as_der()).unwrap();
        assert_eq!(
            key.public_key_raw(),
            &*parsed.public_key().subject_public_key.data
        );
        assert!(KeyStore::from_pkcs12(&p12, "other", Pkcs12ImportPolicy::Strict).is_err());
    }

    #[test]
    fn a_key_where_a_certificate_belongs_is_refused() {
        let (ca, cert) = issued("carol");
        let swapped = Pem {
            cert: cert.key.clone(),
            key: cert.cert.clone(),
        };
        assert!(matches!(
            pkcs12("carol", &swapped, &ca.cert, "pw"),
            Err(KeystoreError::NotPem {
                what: "certificate",
                ..
            })
        ));
        assert!(matches!(
            pkcs12("carol", &cert, "not PEM", "pw"),
            Err(KeystoreError::NotPem {
                what: "CA certificate",
                ..
            })
        ));
    }
}
