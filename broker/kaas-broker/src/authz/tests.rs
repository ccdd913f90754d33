use std::sync::Arc;

use kaas_shared::fs::MemFs;

use super::model::{AccessEntry, AclBinding, AclFilter, Operation, PatternType, Permission, ResourcePattern, ResourceType};
use super::*;

fn acl(name: &str, principal: &str) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern { resource_type: ResourceType::Topic, name: name.into(), pattern_type: PatternType::Literal },
        entry: AccessEntry { principal: principal.into(), host: "*".into(), operation: Operation::Read, permission: Permission::Allow },
    }
}

fn open(fs: &Arc<MemFs>, max_acls: usize) -> Authorizer {
    let layout = Layout::new("/volume");
    // The engine makes the volume's layout before the authorizer opens.
    if let Err(e) = layout.ensure(&**fs) {
        panic!("layout: {e}");
    }
    match Authorizer::open(fs.clone(), &layout, AuthzSettings { policy: Policy::default(), max_acls }) {
        Ok(a) => a,
        Err(e) => panic!("open: {e}"),
    }
}

#[test]
fn changes_are_durable_bounded_and_idempotent() {
    let fs = Arc::new(MemFs::new());
    let authorizer = open(&fs, 2);
    let results = authorizer.create(vec![acl("a", "User:alice"), acl("a", "User:alice"), acl("b", "User:bob")], 0);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert!(matches!(authorizer.create(vec![acl("c", "User:carol")], 0).as_slice(), [Err(AclError::TooMany(2))]));
    assert!(matches!(authorizer.create(vec![acl("c", "alice")], 0).as_slice(), [Err(AclError::Invalid(_))]));
    // What a new broker reads is what was acknowledged.
    assert_eq!(open(&fs, 2).describe(&AclFilter::any()).len(), 2);

    let bob = AclFilter { principal: Some("User:bob".into()), ..AclFilter::any() };
    let removed = authorizer.delete(std::slice::from_ref(&bob), 0).map_err(|e| e.to_string());
    assert_eq!(removed, Ok(vec![vec![acl("b", "User:bob")]]));
    assert_eq!(open(&fs, 2).describe(&AclFilter::any()), vec![acl("a", "User:alice")]);
}

#[test]
fn a_change_that_cannot_be_fsynced_is_refused_and_not_applied() {
    let fs = Arc::new(MemFs::new());
    let authorizer = open(&fs, 10);
    fs.fail_syncs(true);
    assert!(matches!(authorizer.create(vec![acl("a", "User:alice")], 0).as_slice(), [Err(AclError::File(WriteError::Storage(_)))]));
    assert!(authorizer.describe(&AclFilter::any()).is_empty());
    fs.fail_syncs(false);
    assert!(authorizer.create(vec![acl("a", "User:alice")], 0).iter().all(Result::is_ok));
    fs.fail_syncs(true);
    assert!(authorizer.delete(&[AclFilter::any()], 0).is_err());
    assert_eq!(authorizer.describe(&AclFilter::any()).len(), 1);
}

/// A cluster's brokers over one volume: the controller's change reaches the others at their
/// next refresh; a new controller starts from the file, not from what it last read; a deposed
/// one writes nothing.
#[test]
fn the_controller_writes_and_every_broker_follows() {
    let fs = Arc::new(MemFs::new());
    let (old_controller, follower) = (open(&fs, 10), open(&fs, 10));
    assert!(old_controller.create(vec![acl("a", "User:alice")], 3).iter().all(Result::is_ok));
    assert!(follower.describe(&AclFilter::any()).is_empty(), "not read yet");
    follower.refresh().unwrap_or_else(|e| panic!("refresh: {e}"));
    assert_eq!(follower.describe(&AclFilter::any()), vec![acl("a", "User:alice")]);

    // The follower becomes controller (epoch 4) before its next refresh saw the latest change.
    assert!(old_controller.create(vec![acl("b", "User:bob")], 3).iter().all(Result::is_ok));
    assert!(follower.create(vec![acl("c", "User:carol")], 4).iter().all(Result::is_ok));
    let mut names: Vec<String> = open(&fs, 10).describe(&AclFilter::any()).into_iter().map(|a| a.pattern.name).collect();
    names.sort();
    assert_eq!(names, ["a", "b", "c"], "the new controller kept the old one's last change");

    // The deposed controller changes nothing.
    assert!(matches!(
        old_controller.create(vec![acl("d", "User:dan")], 3).as_slice(),
        [Err(AclError::File(WriteError::NotController { found: 4, ours: 3 }))]
    ));
    assert!(matches!(old_controller.delete(&[AclFilter::any()], 3), Err(AclError::File(WriteError::NotController { .. }))));
    assert_eq!(open(&fs, 10).describe(&AclFilter::any()).len(), 3);
}
