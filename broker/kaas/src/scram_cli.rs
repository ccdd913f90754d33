//! `kaas scram-credential`: adds, replaces or deletes a user's SCRAM credential in the file
//! `--sasl-credentials` names. Only the salted credential is written; the password is read from
//! `KAAS_SCRAM_PASSWORD` or the first line of standard input, never from the command line
//! (where `ps` would show it).

use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use kaas_broker::sasl::credentials::Users;
use kaas_broker::sasl::scram::{self, ScramCredential, ScramHash};

#[derive(Debug, Clone, Args)]
pub(crate) struct ScramCredentialArgs {
    /// The credentials file (created if missing).
    #[arg(long)]
    credentials: PathBuf,
    /// The user name.
    #[arg(long)]
    user: String,
    /// SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, default_value = "SCRAM-SHA-512")]
    mechanism: String,
    /// PBKDF2 iterations (Kafka accepts 4096..=16384).
    #[arg(long, default_value_t = 8192)]
    iterations: u32,
    /// Delete the user's credential for this mechanism instead.
    #[arg(long)]
    delete: bool,
}

pub(crate) fn run(args: &ScramCredentialArgs) -> anyhow::Result<()> {
    let hash = match args.mechanism.as_str() {
        "SCRAM-SHA-256" => ScramHash::Sha256,
        "SCRAM-SHA-512" => ScramHash::Sha512,
        other => bail!("--mechanism {other:?} is not SCRAM-SHA-256 or SCRAM-SHA-512"),
    };
    if args.user.is_empty() {
        bail!("--user is empty");
    }
    let mut users = Users::load_or_empty(&args.credentials).map_err(anyhow::Error::msg)?;
    if args.delete {
        if !users.remove(&args.user, hash) {
            bail!("{} has no {} credential for {:?}", args.credentials.display(), hash.mechanism(), args.user);
        }
    } else {
        if !hash.iterations_allowed(args.iterations) {
            bail!("--iterations {} is outside 4096..=16384", args.iterations);
        }
        let password = password()?;
        let salt = scram::random_bytes::<32>();
        users.set(&args.user, hash, ScramCredential::derive(hash, password.as_bytes(), &salt, args.iterations));
    }
    users.save(&args.credentials).with_context(|| format!("writing {}", args.credentials.display()))?;
    println!("{} {} credential of {:?} in {}", if args.delete { "deleted the" } else { "set the" }, hash.mechanism(), args.user, args.credentials.display());
    Ok(())
}

fn password() -> anyhow::Result<String> {
    if let Ok(password) = std::env::var("KAAS_SCRAM_PASSWORD") {
        return Ok(password);
    }
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).context("reading the password from standard input")?;
    let password = line.trim_end_matches(['\r', '\n']).to_string();
    if password.is_empty() {
        bail!("no password: set KAAS_SCRAM_PASSWORD or write it on standard input");
    }
    Ok(password)
}
