//! Kubernetes Events: one for each decision the operator takes (a rollout, a scale, a refused
//! spec, a topic written) and each reconcile error, so `kubectl describe` tells the story
//! without the operator's logs. Publishing is best effort: an event that cannot be written is
//! logged, never a reason to fail a reconcile.

use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::warn;

/// A recorder reporting as `controller` from this pod.
pub fn recorder(client: &Client, controller: &str) -> Recorder {
    Recorder::new(
        client.clone(),
        Reporter {
            controller: controller.into(),
            instance: std::env::var("HOSTNAME").ok(),
        },
    )
}

/// The longest note the API server accepts (an Event's `note`/`message`).
pub const MAX_NOTE: usize = 1024;

/// `note` cut to [`MAX_NOTE`] bytes on a character boundary: an API error's text can be longer,
/// and a refused event would say nothing at all.
pub fn truncate(mut note: String) -> String {
    if note.len() > MAX_NOTE {
        let mut end = MAX_NOTE - '…'.len_utf8();
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push('…');
    }
    note
}

/// Publishes one event about `object`.
pub async fn publish(
    recorder: &Recorder,
    object: &k8s_openapi::api::core::v1::ObjectReference,
    warning: bool,
    reason: &str,
    note: String,
    action: &str,
) {
    let event = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(truncate(note)),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, object).await {
        warn!(error = %e, reason, "cannot publish event");
    }
}

/// The Warning event of a failed reconcile.
pub async fn reconcile_failed(
    recorder: &Recorder,
    object: &k8s_openapi::api::core::v1::ObjectReference,
    error: &crate::Error,
) {
    let note = format!("{error} (retried with backoff)");
    publish(recorder, object, true, "ReconcileFailed", note, "Reconcile").await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        assert_eq!(truncate("short".into()), "short");
        let long = "é".repeat(1000);
        let cut = truncate(long);
        assert!(cut.len() <= MAX_NOTE && cut.ends_with('…'), "{}", cut.len());
    }
}
