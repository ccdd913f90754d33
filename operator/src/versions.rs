//! Which broker versions this operator manages. The operator and the broker are released
//! independently; an operator renders flags and environment for the broker versions it knows and
//! refuses the others with a `Degraded` condition rather than guess (DESIGN "Two artifacts").

/// The operator's own version (independent of the broker's).
pub const OPERATOR_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The operator version this one replaces in the OLM upgrade graph (`spec.replaces` of the
/// CSV); `None` for the first release. `olm.skipRange` lets any older version upgrade directly.
pub const REPLACES_OPERATOR_VERSION: Option<&str> = None;

/// Broker versions this operator manages, as `major.minor` prefixes of the `version` field.
pub const SUPPORTED_BROKER_MINORS: &[&str] = &["0.1"];

/// The image repository brokers are published to; `image` in the spec overrides it.
pub const BROKER_IMAGE_REPOSITORY: &str = "ghcr.io/kaas/kaas";

/// The image repository of this operator (also the volume agent's image).
pub const OPERATOR_IMAGE_REPOSITORY: &str = "ghcr.io/kaas/kaas-operator";

/// Whether `version` (`0.1.3`, `0.1.0-rc.1`) is a broker version this operator manages.
pub fn is_supported(version: &str) -> bool {
    let mut parts = version.splitn(3, '.');
    let (Some(major), Some(minor)) = (parts.next(), parts.next()) else {
        return false;
    };
    let patch_ok = parts.next().is_none_or(|p| {
        let digits = p.split(['-', '+']).next().unwrap_or_default();
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    });
    patch_ok
        && SUPPORTED_BROKER_MINORS
            .iter()
            .any(|m| *m == format!("{major}.{minor}"))
}

/// The broker image for a spec: its override, else the published image of its version.
pub fn broker_image(version: &str, image: Option<&str>) -> String {
    match image {
        Some(image) => image.to_owned(),
        None => format!("{BROKER_IMAGE_REPOSITORY}:{version}"),
    }
}

/// The default image of this operator (the volume agent runs it too).
pub fn operator_image() -> String {
    format!("{OPERATOR_IMAGE_REPOSITORY}:{OPERATOR_VERSION}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_versions() {
        assert!(is_supported("0.1.0"));
        assert!(is_supported("0.1.12-rc.1"));
        assert!(is_supported("0.1"));
        assert!(!is_supported("0.2.0"));
        assert!(!is_supported("1.0.0"));
        assert!(!is_supported("0.1.x"));
        assert!(!is_supported("latest"));
        assert!(!is_supported(""));
    }

    #[test]
    fn images() {
        assert_eq!(broker_image("0.1.0", None), "ghcr.io/kaas/kaas:0.1.0");
        assert_eq!(broker_image("0.1.0", Some("me/kaas:dev")), "me/kaas:dev");
    }
}
