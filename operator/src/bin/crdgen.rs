//! Prints or writes what is generated from the Rust types (see `kaas_operator::crdgen`).
//!
//! - `crdgen`                         print every CRD as one YAML stream
//! - `crdgen write [ROOT]`            write crds/ and the generated parts of config/
//! - `crdgen bundle DIR IMAGE [CHAN]` write an OLM bundle into DIR

use std::path::{Path, PathBuf};

use anyhow::Context;
use kaas_operator::crdgen;

fn write_all(root: &Path, files: Vec<(PathBuf, String)>) -> anyhow::Result<()> {
    for (path, text) in files {
        let path = root.join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] => {
            for (_, crd) in crdgen::crds() {
                print!("---\n{}", serde_yaml::to_string(&crd)?);
            }
            Ok(())
        }
        ["write"] => write_all(Path::new("."), crdgen::repo_files()),
        ["write", root] => write_all(Path::new(root), crdgen::repo_files()),
        ["bundle", dir, image] => write_all(Path::new(dir), crdgen::bundle_files(image, "alpha")),
        ["bundle", dir, image, channel] => {
            write_all(Path::new(dir), crdgen::bundle_files(image, channel))
        }
        _ => anyhow::bail!("usage: crdgen [write [ROOT] | bundle DIR IMAGE [CHANNEL]]"),
    }
}
