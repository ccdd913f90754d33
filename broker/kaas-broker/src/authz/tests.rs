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
    let results = authorizer.create(vec![acl("a", "User:alice"), acl("a", "User:alice"), acl("b", "User:bob")]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert!(matches!(authorizer.create(vec![acl("c", "User:carol")]).as_slice(), [Err(AclError::TooMany(2))]));
    assert!(matches!(authorizer.create(vec![acl("c", "alice")]).as_slice(), [Err(AclError::Invalid(_))]));
    // What a new broker reads is what was acknowledged.
    assert_eq!(open(&fs, 2).describe(&AclFilter::any()).len(), 2);

    let bob = AclFilter { principal: Some("User:bob".into()), ..AclFilter::any() };
    let removed = authorizer.delete(std::slice::from_ref(&bob)).map_err(|e| e.to_string());
    assert_eq!(removed, Ok(vec![vec![acl("b", "User:bob")]]));
    assert_eq!(open(&fs, 2).describe(&AclFilter::any()), vec![acl("a", "User:alice")]);
}

#[test]
fn a_change_that_cannot_be_fsynced_is_refused_and_not_applied() {
    let fs = Arc::new(MemFs::new());
    let authorizer = open(&fs, 10);
    fs.fail_syncs(true);
    assert!(matches!(authorizer.create(vec![acl("a", "User:alice")]).as_slice(), [Err(AclError::Storage(_))]));
    assert!(authorizer.describe(&AclFilter::any()).is_empty());
    fs.fail_syncs(false);
    assert!(authorizer.create(vec![acl("a", "User:alice")]).iter().all(Result::is_ok));
    fs.fail_syncs(true);
    assert!(authorizer.delete(&[AclFilter::any()]).is_err());
    assert_eq!(authorizer.describe(&AclFilter::any()).len(), 1);
}
