//! The watch streams that trigger the controllers' reconciles, each passing through the
//! [`WorkQueue`] gauge on its way: kube-runtime builds the same streams inside
//! `Controller::new`, `owns` and `watches`, but then nothing outside it sees what is waiting.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::{Stream, TryStreamExt};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::metrics::WorkQueue;

/// The controller's own objects, reflected into `writer` (the controller's store): a created
/// or changed object waits in `queue` until its reconcile starts; a deleted one is forgotten
/// (kube-runtime runs no reconcile for it).
pub fn own<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    queue: Arc<WorkQueue>,
    controller: &'static str,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    own_and_deleted(api, config, writer, queue, controller, |_| {})
}

/// [`own`], also calling `deleted` with each object whose deletion the watch sees (to start
/// the clean-up of what a reconcile cannot see, such as a deleted user's entry on the volume).
pub fn own_and_deleted<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    queue: Arc<WorkQueue>,
    controller: &'static str,
    deleted: impl Fn(&K) + Send + 'static,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    reflector::reflector(writer, watcher(api, config))
        .inspect_ok(move |event| match event {
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                queue.waiting(
                    controller,
                    &obj.namespace().unwrap_or_default(),
                    &obj.name_any(),
                );
            }
            watcher::Event::Delete(obj) => {
                queue.picked_up(
                    controller,
                    &obj.namespace().unwrap_or_default(),
                    &obj.name_any(),
                );
                deleted(obj);
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        })
        .applied_objects()
}

/// Objects `Owner` owns (their metadata only, as `Controller::owns` watches them): each event
/// puts the owner in `queue`.
pub fn owned<Owner, Child>(
    api: Api<PartialObjectMeta<Child>>,
    config: watcher::Config,
    queue: Arc<WorkQueue>,
    controller: &'static str,
) -> impl Stream<Item = Result<PartialObjectMeta<Child>, watcher::Error>> + Send + 'static
where
    Owner: Resource<DynamicType = ()>,
    Child: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    watcher(api, config)
        .touched_objects()
        .inspect_ok(move |child| {
            let namespace = child.metadata.namespace.clone().unwrap_or_default();
            let owners = child.metadata.owner_references.iter().flatten();
            for owner in owners
                .filter(|o| o.kind == Owner::kind(&()) && o.api_version == Owner::api_version(&()))
            {
                queue.waiting(controller, &namespace, &owner.name);
            }
        })
}

/// Other objects that `map` ties to one of the controller's: each event puts that one in `queue`.
pub fn mapped<Owner, Other>(
    api: Api<Other>,
    config: watcher::Config,
    map: impl Fn(&Other) -> Option<ObjectRef<Owner>> + Send + 'static,
    queue: Arc<WorkQueue>,
    controller: &'static str,
) -> impl Stream<Item = Result<Other, watcher::Error>> + Send + 'static
where
    Owner: Resource<DynamicType = ()>,
    Other: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    watcher(api, config)
        .touched_objects()
        .inspect_ok(move |other| {
            if let Some(target) = map(other) {
                queue.waiting(
                    controller,
                    target.namespace.as_deref().unwrap_or_default(),
                    &target.name,
                );
            }
        })
}
