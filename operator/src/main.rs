//! `kaas-operator run` (the manager) and `kaas-operator volume-agent` (one per cluster).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kaas_operator::cluster::{self, Context};
use kaas_operator::install::Install;
use kaas_operator::leader::{self, Elector, KubeLease, Leadership};
use kaas_operator::metrics::ReconcileMetrics;
use kaas_operator::topic::{self, AgentContext};
use kaas_operator::{self_monitoring, sweep, triggers, user, versions};
use kaas_shared::crd::{KafkaCluster, KafkaClusterAssignments, KafkaTopic, KafkaUser};
use kaas_shared::fs::RealFs;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, Resource};
use tokio::sync::watch;
use tracing::info;

#[derive(Parser, Debug)]
#[command(version, about = "The kaas operator")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

/// What both roles take: where `/healthz`, `/readyz` and `/metrics` are served, and the Lease.
#[derive(clap::Args, Debug)]
struct Common {
    /// Where `/healthz`, `/readyz` and `/metrics` are served.
    #[arg(long, env = "KAAS_METRICS_LISTEN", default_value = "0.0.0.0:9096", value_parser = kaas_shared::listen_address::parse)]
    metrics_listen: std::net::SocketAddr,
    /// Take part in leader election on a Lease: only the holder acts, so two replicas can run.
    #[arg(long, env = "KAAS_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Reconcile KafkaClusters in every namespace.
    Run {
        /// Image of the per-cluster volume agents (this operator's own image).
        #[arg(long, env = "KAAS_AGENT_IMAGE", default_value_t = versions::operator_image())]
        agent_image: String,
        /// Namespace of the manager's Lease (its own namespace; the client's default if unset).
        #[arg(long, env = "KAAS_POD_NAMESPACE")]
        lease_namespace: Option<String>,
        /// Reconcile only the KafkaClusters of these namespaces (comma-separated; OLM passes
        /// its `olm.targetNamespaces`), with Roles there instead of a ClusterRole. Empty: every
        /// namespace.
        #[arg(
            long,
            env = "KAAS_WATCH_NAMESPACES",
            value_delimiter = ',',
            default_value = ""
        )]
        watch_namespaces: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
    /// Reconcile one cluster's KafkaTopics and KafkaUsers on its shared volume, reclaim deleted
    /// topics' directories and remove deleted users.
    VolumeAgent {
        /// The cluster's namespace.
        #[arg(long, env = "KAAS_NAMESPACE")]
        namespace: String,
        /// The KafkaCluster's name.
        #[arg(long, env = "KAAS_CLUSTER")]
        cluster: String,
        /// Where the cluster's claim is mounted.
        #[arg(long, env = "KAAS_DATA_DIR", default_value = "/data")]
        data_dir: PathBuf,
        /// Seconds between reclamation rounds (deleted topics' directories, deleted users'
        /// entries).
        #[arg(long, env = "KAAS_SWEEP_INTERVAL_SECS", default_value_t = 5)]
        sweep_interval_secs: u64,
        #[command(flatten)]
        common: Common,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .init();
    let args = Args::parse();
    let client = Client::try_default()
        .await
        .context("connecting to Kubernetes")?;
    match args.command {
        Command::Run {
            agent_image,
            lease_namespace,
            watch_namespaces,
            common,
        } => {
            let namespace =
                lease_namespace.unwrap_or_else(|| client.default_namespace().to_owned());
            let install = Install::new(&namespace, &watch_namespaces);
            let lease = KubeLease::new(client.clone(), &namespace, "kaas-operator", None);
            let process = Process::start(&client, &common, lease).await?;
            run(client, agent_image, install, process).await
        }
        Command::VolumeAgent {
            namespace,
            cluster,
            data_dir,
            sweep_interval_secs,
            common,
        } => {
            // The agent's Lease is owned by its KafkaCluster: deleted with it.
            let owner = Api::<KafkaCluster>::namespaced(client.clone(), &namespace)
                .get(&cluster)
                .await
                .with_context(|| format!("reading KafkaCluster {namespace}/{cluster}"))?
                .controller_owner_ref(&());
            let lease = KubeLease::new(
                client.clone(),
                &namespace,
                &format!("{cluster}-volume-agent"),
                owner,
            );
            let process = Process::start(&client, &common, lease).await?;
            volume_agent(
                client,
                namespace,
                cluster,
                data_dir,
                Duration::from_secs(sweep_interval_secs),
                process,
            )
            .await
        }
    }
}

/// What both roles run around their controllers: the HTTP server, the election, and the stop
/// signal. Shutdown is a protocol: SIGTERM stops the controllers, then the Lease is released,
/// then the server stops, and each is awaited.
struct Process {
    registry: prometheus_client::registry::Registry,
    metrics: ReconcileMetrics,
    leadership: Leadership,
    stop: watch::Receiver<bool>,
    elector_stop: watch::Sender<bool>,
    elector: Option<tokio::task::JoinHandle<()>>,
    listener: tokio::net::TcpListener,
    ready: Arc<AtomicBool>,
}

impl Process {
    async fn start(client: &Client, common: &Common, lease: KubeLease) -> anyhow::Result<Process> {
        let (stop_tx, stop) = watch::channel(false);
        tokio::spawn(async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(term) => term,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot listen for SIGTERM");
                        return;
                    }
                };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            info!("stop signal received");
            let _ = stop_tx.send(true);
        });
        let metrics = ReconcileMetrics::default();
        let mut registry = prometheus_client::registry::Registry::with_prefix("kaas");
        metrics.register(&mut registry);
        let listener = tokio::net::TcpListener::bind(common.metrics_listen)
            .await
            .with_context(|| format!("binding {}", common.metrics_listen))?;
        let ready = Arc::new(AtomicBool::new(false));
        let (elector_stop, elector_stopped) = watch::channel(false);
        let (leadership, elector) = if common.leader_elect {
            let elector = Elector::new(
                Arc::new(lease),
                leader::identity(),
                leader::Timing::default(),
            )
            .with_gauge(metrics.leader.clone())
            .with_ready(ready.clone());
            (
                elector.leadership(),
                Some(tokio::spawn(elector.run(elector_stopped))),
            )
        } else {
            let _ = client;
            ready.store(true, Ordering::SeqCst);
            metrics.leader.set(1);
            (Leadership::always(), None)
        };
        Ok(Process {
            registry,
            metrics,
            leadership,
            stop,
            elector_stop,
            elector,
            listener,
            ready,
        })
    }

    /// Serves HTTP, and runs `act` each time this replica acquires the Lease, with a trigger
    /// that fires when it loses the Lease or the process is asked to stop; then releases the
    /// Lease and stops the server.
    async fn run<F, Fut>(self, mut act: F) -> anyhow::Result<()>
    where
        F: FnMut(std::pin::Pin<Box<dyn Future<Output = ()> + Send + Sync>>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let (leadership, stop) = (self.leadership, self.stop);
        let server = tokio::spawn(kaas_operator::metrics::serve(
            self.listener,
            Arc::new(self.registry),
            self.ready,
            stop.clone(),
        ));
        loop {
            let mut waiting = leadership.clone();
            let mut stopping = stop.clone();
            tokio::select! {
                acquired = waiting.acquired() => if !acquired { break },
                _ = stopping.wait_for(|s| *s) => break,
            }
            let (mut lost, mut stopping) = (leadership.clone(), stop.clone());
            act(Box::pin(async move {
                tokio::select! {
                    () = lost.lost() => {}
                    _ = stopping.wait_for(|s| *s) => {}
                }
            }))
            .await;
            if *stop.borrow() {
                break;
            }
            info!("stopped acting; standing by for the lease");
        }
        let _ = self.elector_stop.send(true);
        if let Some(elector) = self.elector {
            elector.await.context("election task")?;
        }
        server.await.context("HTTP server")?;
        Ok(())
    }
}

/// A watch of the objects this operator applies (labelled `app.kubernetes.io/managed-by`).
fn managed() -> watcher::Config {
    watcher::Config::default().labels(&format!(
        "{}={}",
        kaas_operator::resources::LABEL_MANAGED_BY,
        kaas_operator::FIELD_MANAGER
    ))
}

/// An API of `K` in `namespace`, or in every namespace.
fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The KafkaCluster an assignment mirror belongs to: it is named after its cluster.
fn mirrored_cluster(mirror: &KafkaClusterAssignments) -> Option<ObjectRef<KafkaCluster>> {
    let (name, namespace) = mirror
        .metadata
        .name
        .as_ref()
        .zip(mirror.metadata.namespace.as_ref())?;
    Some(ObjectRef::<KafkaCluster>::new(name).within(namespace))
}

/// The KafkaCluster controller over one namespace (or all), until `stop`.
async fn cluster_controller(
    client: Client,
    namespace: Option<String>,
    ctx: Arc<Context>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = namespace.as_deref();
    let queue = ctx.metrics.queue.clone();
    let (reader, writer) = reflector::store();
    let clusters = triggers::own(
        api::<KafkaCluster>(&client, ns),
        watcher::Config::default(),
        writer,
        queue.clone(),
        cluster::CONTROLLER,
    );
    let controller = Controller::for_stream(clusters, reader);
    // Counted in kaas_operator_resources while this controller runs.
    let _counted = ctx
        .metrics
        .readiness
        .count("KafkaCluster", controller.store());
    controller
        // Only what this operator manages is watched and cached, not every StatefulSet
        // and Deployment in the cluster: everything it applies carries this label.
        .owns_stream(triggers::owned::<KafkaCluster, _>(
            api::<PartialObjectMeta<StatefulSet>>(&client, ns),
            managed(),
            queue.clone(),
            cluster::CONTROLLER,
        ))
        .owns_stream(triggers::owned::<KafkaCluster, _>(
            api::<PartialObjectMeta<Deployment>>(&client, ns),
            managed(),
            queue.clone(),
            cluster::CONTROLLER,
        ))
        // The controller broker's assignment mirror, named after its cluster: status
        // shows the current controller and assignment version as soon as they change.
        .watches_stream(
            triggers::mapped(
                api::<KafkaClusterAssignments>(&client, ns),
                watcher::Config::default(),
                mirrored_cluster,
                queue.clone(),
                cluster::CONTROLLER,
            ),
            |mirror| mirrored_cluster(&mirror),
        )
        .graceful_shutdown_on(stop)
        .run(cluster::reconcile, cluster::error_policy, ctx)
        .for_each(|result| async move {
            if let Ok((obj, _)) = result {
                tracing::debug!(cluster = %obj.name, "reconciled");
            }
        })
        .await;
    queue.stopped(cluster::CONTROLLER);
}

async fn run(
    client: Client,
    agent_image: String,
    install: Install,
    process: Process,
) -> anyhow::Result<()> {
    info!(
        version = versions::OPERATOR_VERSION,
        install = %install.claim_value(),
        watched = ?install.watched,
        "kaas-operator manager starting"
    );
    let ctx = Arc::new(Context::new(
        client.clone(),
        agent_image,
        process.metrics.clone(),
        install.clone(),
    ));
    // One controller per watched namespace (a namespace-scoped install may list, watch and
    // cache nothing outside them), or one over every namespace.
    let namespaces: Vec<Option<String>> = if install.is_namespaced() {
        install.watched.iter().cloned().map(Some).collect()
    } else {
        vec![None]
    };
    process
        .run(|stop| {
            let (client, ctx, namespaces) = (client.clone(), ctx.clone(), namespaces.clone());
            let own_namespace = install.namespace.clone();
            async move {
                let stop = stop.shared();
                let monitors =
                    self_monitoring::keep_applied(client.clone(), own_namespace, stop.clone());
                let controllers =
                    futures::future::join_all(namespaces.into_iter().map(|ns| {
                        cluster_controller(client.clone(), ns, ctx.clone(), stop.clone())
                    }));
                futures::future::join(monitors, controllers).await;
            }
        })
        .await?;
    info!("kaas-operator manager stopped");
    Ok(())
}

async fn volume_agent(
    client: Client,
    namespace: String,
    cluster: String,
    data_dir: PathBuf,
    interval: Duration,
    process: Process,
) -> anyhow::Result<()> {
    info!(%namespace, %cluster, data_dir = %data_dir.display(), "volume agent starting");
    let metrics = kaas_operator::metrics::ReclaimMetrics::default();
    let mut process = process;
    metrics.register(&mut process.registry);
    let template = AgentContext {
        recorder: kaas_operator::events::recorder(&client, "kaas-volume-agent"),
        client,
        namespace,
        cluster,
        fs: Arc::new(RealFs),
        root: data_dir,
        volume_lock: Arc::new(Mutex::new(())),
        topics: kube::runtime::reflector::store::Writer::default().as_reader(),
        leadership: process.leadership.clone(),
        metrics: process.metrics.clone(),
        backoff: Arc::default(),
    };
    process
        .run(|stop| {
            let (template, metrics) = (template.clone(), metrics.clone());
            async move {
                let queue = template.metrics.queue.clone();
                let (reader, writer) = reflector::store();
                let topics = triggers::own(
                    Api::<KafkaTopic>::namespaced(template.client.clone(), &template.namespace),
                    watcher::Config::default(),
                    writer,
                    queue.clone(),
                    topic::CONTROLLER,
                );
                let controller = Controller::for_stream(topics, reader);
                let _counted = template
                    .metrics
                    .readiness
                    .count("KafkaTopic", controller.store());
                // A deleted KafkaUser nudges the sweeper, which removes its entry from
                // kafka-users.json (there is no finalizer to hold the deletion until then).
                let nudge = Arc::new(tokio::sync::Notify::new());
                let (user_reader, user_writer) = reflector::store();
                let users = triggers::own_and_deleted(
                    Api::<KafkaUser>::namespaced(template.client.clone(), &template.namespace),
                    watcher::Config::default(),
                    user_writer,
                    queue.clone(),
                    user::CONTROLLER,
                    {
                        let nudge = nudge.clone();
                        move |_: &KafkaUser| nudge.notify_one()
                    },
                );
                let user_controller = Controller::for_stream(users, user_reader);
                let _counted_users = template
                    .metrics
                    .readiness
                    .count("KafkaUser", user_controller.store());
                let ctx = Arc::new(AgentContext {
                    topics: controller.store(),
                    ..template
                });
                let (sweep_stop, sweep_stopped) = watch::channel(false);
                let sweeper = tokio::spawn(sweep::run(
                    ctx.clone(),
                    interval,
                    metrics,
                    nudge,
                    sweep_stopped,
                ));
                let stop = stop.shared();
                let topics = controller
                    .graceful_shutdown_on(stop.clone())
                    .run(topic::reconcile, topic::error_policy, ctx.clone())
                    .for_each(|_| async {});
                let users = user_controller
                    .graceful_shutdown_on(stop)
                    .run(user::reconcile, user::error_policy, ctx)
                    .for_each(|_| async {});
                futures::future::join(topics, users).await;
                queue.stopped(topic::CONTROLLER);
                queue.stopped(user::CONTROLLER);
                // The sweeper hears the stop and is awaited before the Lease may be released.
                let _ = sweep_stop.send(true);
                if let Err(e) = sweeper.await {
                    tracing::error!(error = %e, "sweeper task failed");
                }
            }
        })
        .await?;
    info!("volume agent stopped");
    Ok(())
}
