//! `kaas-operator run` (the manager) and `kaas-operator volume-agent` (one per cluster).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kaas_operator::cluster::{self, Context};
use kaas_operator::topic::{self, AgentContext};
use kaas_operator::{sweep, versions};
use kaas_shared::crd::{KafkaCluster, KafkaClusterAssignments, KafkaTopic};
use kaas_shared::fs::RealFs;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, Client};
use tracing::info;

#[derive(Parser, Debug)]
#[command(version, about = "The kaas operator")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Reconcile KafkaClusters in every namespace.
    Run {
        /// Image of the per-cluster volume agents (this operator's own image).
        #[arg(long, env = "KAAS_AGENT_IMAGE", default_value_t = versions::operator_image())]
        agent_image: String,
    },
    /// Reconcile one cluster's KafkaTopics on its shared volume, and reclaim deleted topics'
    /// directories.
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
        /// Seconds between reclamation rounds.
        #[arg(long, env = "KAAS_SWEEP_INTERVAL_SECS", default_value_t = 5)]
        sweep_interval_secs: u64,
        /// Where `/metrics` (reclamation state) is served.
        #[arg(long, env = "KAAS_METRICS_LISTEN", default_value = "0.0.0.0:9096", value_parser = kaas_shared::listen_address::parse)]
        metrics_listen: std::net::SocketAddr,
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
        Command::Run { agent_image } => run(client, agent_image).await,
        Command::VolumeAgent {
            namespace,
            cluster,
            data_dir,
            sweep_interval_secs,
            metrics_listen,
        } => {
            volume_agent(
                client,
                namespace,
                cluster,
                data_dir,
                Duration::from_secs(sweep_interval_secs),
                metrics_listen,
            )
            .await
        }
    }
}

async fn run(client: Client, agent_image: String) -> anyhow::Result<()> {
    info!(
        version = versions::OPERATOR_VERSION,
        "kaas-operator manager starting"
    );
    let ctx = Arc::new(Context {
        client: client.clone(),
        agent_image,
    });
    Controller::new(
        Api::<KafkaCluster>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(
        Api::<StatefulSet>::all(client.clone()),
        watcher::Config::default(),
    )
    .owns(
        Api::<Deployment>::all(client.clone()),
        watcher::Config::default(),
    )
    // The controller broker's assignment mirror, named after its cluster: status shows the
    // current controller and assignment version as soon as they change.
    .watches(
        Api::<KafkaClusterAssignments>::all(client),
        watcher::Config::default(),
        |mirror| {
            mirror
                .metadata
                .name
                .clone()
                .zip(mirror.metadata.namespace.clone())
                .map(|(name, namespace)| ObjectRef::<KafkaCluster>::new(&name).within(&namespace))
        },
    )
    .shutdown_on_signal()
    .run(cluster::reconcile, cluster::error_policy, ctx)
    .for_each(|result| async move {
        if let Ok((obj, _)) = result {
            tracing::debug!(cluster = %obj.name, "reconciled");
        }
    })
    .await;
    info!("kaas-operator manager stopped");
    Ok(())
}

async fn volume_agent(
    client: Client,
    namespace: String,
    cluster: String,
    data_dir: PathBuf,
    interval: Duration,
    metrics_listen: std::net::SocketAddr,
) -> anyhow::Result<()> {
    info!(%namespace, %cluster, data_dir = %data_dir.display(), "volume agent starting");
    let controller = Controller::new(
        Api::<KafkaTopic>::namespaced(client.clone(), &namespace),
        watcher::Config::default(),
    );
    let ctx = Arc::new(AgentContext {
        client: client.clone(),
        namespace,
        cluster,
        fs: Arc::new(RealFs),
        root: data_dir,
        volume_lock: Arc::new(Mutex::new(())),
        topics: controller.store(),
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let metrics = kaas_operator::metrics::ReclaimMetrics::default();
    let mut registry = prometheus_client::registry::Registry::with_prefix("kaas");
    metrics.register(&mut registry);
    let listener = tokio::net::TcpListener::bind(metrics_listen)
        .await
        .with_context(|| format!("binding {metrics_listen}"))?;
    let metrics_server = tokio::spawn(kaas_operator::metrics::serve(
        listener,
        Arc::new(registry),
        stop_rx.clone(),
    ));
    let sweeper = tokio::spawn(sweep::run(ctx.clone(), interval, metrics, stop_rx));
    controller
        .shutdown_on_signal()
        .run(topic::reconcile, topic::error_policy, ctx)
        .for_each(|_| async {})
        .await;
    // Shutdown is a protocol: the sweeper hears it and is awaited.
    let _ = stop_tx.send(true);
    sweeper.await.context("sweeper task")?;
    metrics_server.await.context("metrics server")?;
    info!("volume agent stopped");
    Ok(())
}
