//! Test certificates and users: a CA that signs certificate files (rcgen), and SCRAM users
//! written with the real `kaas scram-credential` CLI.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};

use super::TestResult;

/// A CA and the files of certificates it signed.
pub struct Pki {
    dir: PathBuf,
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    pub fn new(dir: &Path, name: &str) -> TestResult<Pki> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        std::fs::write(dir.join(format!("{name}.pem")), issuer.pem())?;
        Ok(Pki { dir: dir.to_path_buf(), issuer })
    }

    pub fn ca(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.pem"))
    }

    /// Writes `<file>.crt` and `<file>.key` for the names given; returns their paths.
    pub fn leaf(&self, file: &str, names: &[&str]) -> TestResult<(PathBuf, PathBuf)> {
        self.leaf_named(file, names, &[(DnType::CommonName, names[0])])
    }

    /// [`Pki::leaf`] with the subject `dn`, most general part first (as it is encoded).
    pub fn leaf_named(&self, file: &str, names: &[&str], dn: &[(DnType, &str)]) -> TestResult<(PathBuf, PathBuf)> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        for (kind, value) in dn {
            params.distinguished_name.push(kind.clone(), *value);
        }
        let cert = params.signed_by(&key, &*self.issuer)?;
        let (crt, pem) = (self.dir.join(format!("{file}.crt")), self.dir.join(format!("{file}.key")));
        std::fs::write(&crt, cert.pem())?;
        std::fs::write(&pem, key.serialize_pem())?;
        Ok((crt, pem))
    }
}

pub fn path(p: &Path) -> &str {
    p.to_str().unwrap_or_default()
}

/// Writes a SCRAM credential with the real CLI, the password on standard input.
pub fn add_user(credentials: &Path, user: &str, password: &str, mechanism: &str) -> TestResult {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kaas"))
        .args(["scram-credential", "--credentials", path(credentials), "--user", user, "--mechanism", mechanism])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    child.stdin.take().ok_or("no stdin")?.write_all(format!("{password}\n").as_bytes())?;
    let out = child.wait_with_output()?;
    assert!(out.status.success(), "scram-credential failed: {}", String::from_utf8_lossy(&out.stdout));
    let text = std::fs::read_to_string(credentials)?;
    assert!(!text.contains(password), "the password itself must not be stored");
    Ok(())
}
