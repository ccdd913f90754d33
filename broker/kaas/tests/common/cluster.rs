//! In-process kaas clusters: several brokers in this test process over one temporary volume,
//! sharing an in-memory `kaas-controller` Lease. Each broker has its own Kafka listener and
//! heartbeat server on 127.0.0.1, so real clients talk to them exactly as to separate processes.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use kaas::cluster::{ClusterSettings, Runtime};
use kaas_broker::config::{ListenerSecurity, StorageMode};
use kaas_broker::{Broker, BrokerConfig, Server, cluster};
use kaas_controller::lease::MemoryLease;
use kaas_shared::assignment::{self, Assignment};
use kaas_shared::fs::{FaultSwitch, FaultyFs, RealFs};
use kaas_shared::layout::Layout;
use rdkafka::ClientConfig;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::TestResult;
use super::faults::CuttableLease;

/// One in-process broker.
pub struct Node {
    pub id: i32,
    pub broker: Arc<Broker>,
    /// Its cluster runtime (controller role, heartbeat).
    pub runtime: Arc<Runtime>,
    pub bootstrap: String,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

/// A cluster of nodes over one data directory.
pub struct Cluster {
    pub data: PathBuf,
    pub lease: Arc<MemoryLease>,
    pub nodes: BTreeMap<i32, Node>,
    /// Each broker's volume mount, healthy until a test switches a fault on (kept across the
    /// broker's restarts, as a node's mount is).
    pub mounts: BTreeMap<i32, FaultSwitch>,
    /// Each broker's way to the Lease: set, the API server is unreachable from that broker.
    pub lease_cuts: BTreeMap<i32, Arc<AtomicBool>>,
    /// The runtimes of paused nodes, for their resume.
    paused: BTreeMap<i32, Arc<Runtime>>,
    /// What every broker's client listener is secured with.
    security: ListenerSecurity,
    /// Changes every broker's cluster settings from the tests' defaults.
    tune: fn(&mut ClusterSettings),
    _tmp: tempfile::TempDir,
}

impl Cluster {
    pub async fn start(brokers: i32) -> TestResult<Cluster> {
        Cluster::start_secured(brokers, ListenerSecurity::default()).await
    }

    /// A cluster whose brokers' client listeners are secured with `security` (TLS, SASL).
    pub async fn start_secured(brokers: i32, security: ListenerSecurity) -> TestResult<Cluster> {
        Cluster::start_tuned(brokers, security, |_| {}).await
    }

    /// A cluster whose brokers' client listeners are secured with `security`, and whose cluster
    /// settings `tune` changes from the tests' defaults.
    pub async fn start_tuned(brokers: i32, security: ListenerSecurity, tune: fn(&mut ClusterSettings)) -> TestResult<Cluster> {
        // The brokers log into the test output (RUST_LOG=info shows every leadership change).
        let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
        let tmp = tempfile::tempdir()?;
        let mut cluster = Cluster {
            data: tmp.path().join("data"),
            lease: Arc::new(MemoryLease::new()),
            nodes: BTreeMap::new(),
            mounts: BTreeMap::new(),
            lease_cuts: BTreeMap::new(),
            paused: BTreeMap::new(),
            security,
            tune,
            _tmp: tmp,
        };
        for id in 0..brokers {
            cluster.start_node(id).await?;
        }
        Ok(cluster)
    }

    pub async fn start_node(&mut self, id: i32) -> TestResult {
        self.start_node_on(id, "127.0.0.1:0").await
    }

    /// Starts node `id` listening on `address` (a restarted pod that keeps its address).
    pub async fn start_node_on(&mut self, id: i32, address: &str) -> TestResult {
        let listener = tokio::net::TcpListener::bind(address).await?;
        let addr = listener.local_addr()?;
        let mount = self.mounts.entry(id).or_default().clone();
        let lease = Arc::new(CuttableLease::new(self.lease.clone(), self.lease_cuts.entry(id).or_default().clone()));
        let volume = FaultyFs::wrap(Arc::new(RealFs), mount);
        let mut settings = ClusterSettings::for_tests(&format!("kaas-{id}"), lease);
        (self.tune)(&mut settings);
        let runtime = Runtime::new(settings, id, volume.clone(), Layout::new(&self.data));
        let config = BrokerConfig {
            node_id: id,
            listen: addr,
            advertise_host: "127.0.0.1".into(),
            advertise_port: addr.port(),
            external: None,
            storage: StorageMode::Disk(self.data.clone()),
            volume_fs: Some(volume),
            auto_create_topics: true,
            cluster: Some(runtime.link()),
            security: self.security.clone(),
            // A first member joins at once (as local mode and Kafka's shipped config do).
            groups: kaas_broker::groups::GroupConfig { initial_rebalance_delay: Duration::ZERO, ..Default::default() },
            ..BrokerConfig::local_in_memory()
        };
        let broker = tokio::task::spawn_blocking(move || Broker::open(config)).await??;
        self.run_node(id, broker, runtime, listener).await
    }

    /// Starts the tasks of an opened (or paused) broker: its cluster runtime, its transaction
    /// completions, its housekeeping and its Kafka listener.
    async fn run_node(&mut self, id: i32, broker: Arc<Broker>, runtime: Arc<Runtime>, listener: tokio::net::TcpListener) -> TestResult {
        let bootstrap = listener.local_addr()?.to_string();
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = runtime.spawn(broker.clone(), stop_rx.clone()).await?;
        tasks.spawn(broker.clone().transactions_loop(stop_rx.clone()));
        // Retention, time-based rolls and idle descriptors, as the binary runs them.
        tasks.spawn(broker.clone().housekeeping_loop(stop_rx.clone()));
        let mut server_stop = stop_rx;
        tasks.spawn(Server::new(listener, broker.clone()).run(async move {
            let _ = server_stop.wait_for(|s| *s).await;
        }));
        self.nodes.insert(id, Node { id, broker, runtime, bootstrap, stop, tasks });
        Ok(())
    }

    /// kill -9: every task of the node stops at once; nothing is relinquished or persisted.
    /// Its transaction shards are dropped from memory, as a dead process's would be, so that
    /// completion drivers it had started stop at their next step.
    pub async fn kill(&mut self, id: i32) {
        if let Some(mut node) = self.nodes.remove(&id) {
            node.tasks.abort_all();
            while node.tasks.join_next().await.is_some() {}
            for shard in 0..kaas_coordinator::SHARD_COUNT {
                let _ = node.broker.txns.abandon(shard);
            }
        }
    }

    /// SIGTERM: drain, stop the tasks, relinquish the rest.
    pub async fn shut_down(&mut self, id: i32) {
        if let Some(mut node) = self.nodes.remove(&id) {
            cluster::drain(&node.broker).await;
            let _ = node.stop.send(true);
            while node.tasks.join_next().await.is_some() {}
            let broker = node.broker.clone();
            let _ = tokio::task::spawn_blocking(move || broker.close()).await;
        }
    }

    pub fn bootstrap(&self) -> String {
        self.nodes.values().map(|n| n.bootstrap.clone()).collect::<Vec<_>>().join(",")
    }

    pub fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.bootstrap());
        c
    }

    pub fn assignment(&self) -> Option<Assignment> {
        assignment::read(&RealFs, &Layout::new(&self.data)).ok().flatten()
    }

    pub fn data(&self) -> &Path {
        &self.data
    }

    /// Polls until `cond` holds for the assignment on the volume.
    pub async fn wait_assignment(&self, timeout: Duration, cond: impl Fn(&Assignment) -> bool) -> TestResult<Assignment> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(a) = self.assignment()
                && cond(&a)
            {
                return Ok(a);
            }
            if Instant::now() > deadline {
                return Err(format!("assignment never satisfied the condition; last: {:?}", self.assignment()).into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls until every partition of `a` — or of a newer assignment, once the controller has
    /// written one (`a` is then superseded and can never be served: the epochs moved on) — is
    /// led by the broker it names, at its epoch. The error names what is not led.
    pub async fn wait_led(&self, timeout: Duration, a: &Assignment) -> TestResult {
        let deadline = Instant::now() + timeout;
        loop {
            let target = match self.assignment() {
                Some(current) if current.assignment_version > a.assignment_version => current,
                _ => a.clone(),
            };
            let missing = self.not_led(&target);
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "partitions were not taken over in time: assignment v{} wants {}",
                    target.assignment_version,
                    missing.join(", ")
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The partitions of `a` not led as it says: `key by leader at epoch (leader leads it at
    /// epoch N | does not lead it | is not running)`.
    fn not_led(&self, a: &Assignment) -> Vec<String> {
        // Each node's led partitions by key, built once: a poll over 10,000 partitions
        // (make bench-scale) must not search a list per partition.
        let led: BTreeMap<i32, std::collections::HashMap<String, (uuid::Uuid, i32)>> = self
            .nodes
            .iter()
            .map(|(id, node)| {
                let here = node
                    .broker
                    .topics
                    .led()
                    .into_iter()
                    .map(|(t, uuid, part, epoch)| (kaas_shared::names::partition_key(&t, part), (uuid, epoch)));
                (*id, here.collect())
            })
            .collect();
        a.partitions
            .iter()
            .filter_map(|(key, p)| {
                let Some(here) = led.get(&p.leader) else {
                    return Some(format!("{key} by {} at {} (not running)", p.leader, p.leader_epoch));
                };
                match here.get(key).filter(|(id, _)| *id == p.topic_id) {
                    Some((_, epoch)) if *epoch == p.leader_epoch => None,
                    Some((_, epoch)) => Some(format!("{key} by {} at {} (leads it at {epoch})", p.leader, p.leader_epoch)),
                    None => Some(format!("{key} by {} at {} (does not lead it)", p.leader, p.leader_epoch)),
                }
            })
            .collect()
    }
}

impl Cluster {
    /// Pauses a node as SIGSTOP would: every task stops, nothing is relinquished, its storage
    /// keeps its descriptors and its belief that it leads. Returns the paused broker.
    pub async fn pause(&mut self, id: i32) -> TestResult<(Arc<Broker>, String)> {
        let mut node = self.nodes.remove(&id).ok_or("no such node")?;
        node.tasks.abort_all();
        while node.tasks.join_next().await.is_some() {}
        self.paused.insert(id, node.runtime);
        Ok((node.broker, node.bootstrap))
    }

    /// Resumes a paused node (SIGCONT): its tasks start again on the same listener address.
    pub async fn resume(&mut self, id: i32, broker: Arc<Broker>, bootstrap: String) -> TestResult {
        let listener = tokio::net::TcpListener::bind(&bootstrap).await?;
        let runtime = self.paused.remove(&id).ok_or("the node was not paused")?;
        self.run_node(id, broker, runtime, listener).await
    }
}
