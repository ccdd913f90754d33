//! The checked-in `crds/` and generated `config/` files must be exactly what the Rust types
//! produce. On failure run `make crds` (or `cargo run -p kaas-operator --bin crdgen -- write`).

use std::path::Path;

#[test]
fn checked_in_files_match_the_rust_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut drifted = Vec::new();
    for (path, expected) in kaas_operator::crdgen::repo_files() {
        match std::fs::read_to_string(root.join(&path)) {
            Ok(found) if found == expected => {}
            Ok(_) => drifted.push(format!("{} differs", path.display())),
            Err(e) => drifted.push(format!("{}: {e}", path.display())),
        }
    }
    assert!(
        drifted.is_empty(),
        "generated files drifted from the Rust types (run `make crds`):\n{}",
        drifted.join("\n")
    );
}
