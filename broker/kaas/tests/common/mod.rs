//! Test support: a real `kaas` broker process and real rdkafka clients pointed at it.
#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::producer::FutureProducer;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

pub mod cluster;
pub mod faults;
pub mod pki;
pub mod share;
pub mod wire;
pub mod workload;

pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A kaas broker running as a child process on an ephemeral loopback port.
pub struct Kaas {
    child: Option<Child>,
    pub bootstrap: String,
    pub data_dir: PathBuf,
    extra_args: Vec<String>,
    /// A command the broker runs under (empty: none).
    launcher: Vec<String>,
    /// librdkafka settings every client of [`Kaas::config`] gets (security settings).
    pub client_settings: Vec<(String, String)>,
    /// The probes and metrics listener (`host:port`), once the broker printed it.
    http: std::sync::Arc<std::sync::Mutex<String>>,
    _tmp: Option<tempfile::TempDir>,
}

impl Kaas {
    /// Starts a broker on a fresh temporary data directory.
    pub fn start() -> TestResult<Kaas> {
        Kaas::start_with(&[])
    }

    pub fn start_with(args: &[&str]) -> TestResult<Kaas> {
        Kaas::start_launched(&[], args)
    }

    /// Starts a broker through `launcher` (a command that execs the rest of its arguments, e.g.
    /// `prlimit --nofile=256:`), with `args`.
    pub fn start_launched(launcher: &[&str], args: &[&str]) -> TestResult<Kaas> {
        let tmp = tempfile::tempdir()?;
        let data_dir = tmp.path().join("data");
        let mut kaas = Kaas {
            child: None,
            bootstrap: String::new(),
            data_dir,
            extra_args: args.iter().map(|s| s.to_string()).collect(),
            launcher: launcher.iter().map(|s| s.to_string()).collect(),
            client_settings: Vec::new(),
            http: Default::default(),
            _tmp: Some(tmp),
        };
        kaas.spawn(None)?;
        Ok(kaas)
    }

    /// (Re)starts the process on the same data directory, on `port` if given.
    fn spawn(&mut self, port: Option<u16>) -> TestResult {
        let listen = format!("127.0.0.1:{}", port.unwrap_or(0));
        let kaas = env!("CARGO_BIN_EXE_kaas");
        let mut command = match self.launcher.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(kaas);
                c
            }
            None => Command::new(kaas),
        };
        let mut child = command
            .arg("--listen")
            .arg(&listen)
            // Several brokers run at once: every listener on a free port.
            .args(["--http-listen", "127.0.0.1:0"])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(&self.extra_args)
            .env_remove("MY_POD_NAME")
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = mpsc::channel();
        let http_seen = self.http.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("kaas probes and metrics on http://") {
                    *http_seen.lock().unwrap_or_else(|e| e.into_inner()) = rest.split_whitespace().next().unwrap_or_default().to_string();
                }
                if let Some(rest) = line.strip_prefix("kaas listening on ") {
                    let addr = rest.split_whitespace().next().unwrap_or_default().to_string();
                    let _ = tx.send(addr);
                }
            }
        });
        let addr = rx.recv_timeout(Duration::from_secs(60)).map_err(|_| "broker did not start within 60 s")?;
        self.bootstrap = addr;
        self.child = Some(child);
        Ok(())
    }

    /// `/metrics` as text.
    pub fn metrics(&self) -> TestResult<String> {
        use std::io::{Read, Write};
        let address = self.http.lock().map_err(|_| "poisoned")?.clone();
        let mut stream = std::net::TcpStream::connect(&address)?;
        stream.set_read_timeout(Some(Duration::from_secs(20)))?;
        write!(stream, "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let (head, body) = response.split_once("\r\n\r\n").ok_or("no HTTP body")?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("/metrics answered {head}").into());
        }
        Ok(body.to_string())
    }

    pub fn port(&self) -> u16 {
        self.bootstrap.rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0)
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// SIGTERM and wait: the graceful path.
    pub fn stop(&mut self) -> TestResult {
        if let Some(mut child) = self.child.take() {
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM)?;
            let status = child.wait()?;
            if !status.success() {
                return Err(format!("kaas exited with {status} after SIGTERM").into());
            }
        }
        Ok(())
    }

    /// SIGKILL: the crash path.
    pub fn kill9(&mut self) -> TestResult {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Starts again on the same data directory and port.
    pub fn restart(&mut self) -> TestResult {
        let port = self.port();
        self.spawn(Some(port))
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        for (k, v) in &self.client_settings {
            c.set(k, v);
        }
        c
    }

    pub fn producer(&self, extra: &[(&str, &str)]) -> TestResult<FutureProducer> {
        let mut c = self.config();
        c.set("message.timeout.ms", "30000");
        for (k, v) in extra {
            c.set(*k, *v);
        }
        Ok(c.create()?)
    }

    pub fn admin(&self) -> TestResult<AdminClient<DefaultClientContext>> {
        Ok(self.config().create()?)
    }

    pub async fn create_topic(&self, name: &str, partitions: i32, configs: &[(&str, &str)]) -> TestResult {
        let admin = self.admin()?;
        let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        for (k, v) in configs {
            topic = topic.set(k, v);
        }
        let results = admin.create_topics([&topic], &AdminOptions::new()).await?;
        for r in results {
            r.map_err(|(t, e)| format!("creating {t}: {e}"))?;
        }
        Ok(())
    }

    /// Reads `count` messages of one partition from `from`, with an assigned (group-less) consumer.
    pub fn consume(&self, topic: &str, partition: i32, from: Offset, count: usize) -> TestResult<Vec<OwnedMessage>> {
        let consumer: BaseConsumer = self.config().set("enable.auto.commit", "false").set("group.id", "kaas-tests").create()?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, from)?;
        consumer.assign(&tpl)?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut out = Vec::new();
        while out.len() < count {
            if Instant::now() > deadline {
                return Err(format!("read {} of {count} messages of {topic}/{partition} before the deadline", out.len()).into());
            }
            if let Some(m) = consumer.poll(Duration::from_millis(200)) {
                out.push(m?.detach());
            }
        }
        Ok(out)
    }
}

impl Drop for Kaas {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The value of one `/metrics` series: `name{labels...}` exactly, in the order given.
pub fn series(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let rendered: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    let prefix = if labels.is_empty() { format!("{name} ") } else { format!("{name}{{{}}} ", rendered.join(",")) };
    text.lines().find_map(|line| line.strip_prefix(&prefix)).and_then(|value| value.trim().parse().ok())
}

/// The payload of a message as a Vec (empty for a null payload).
pub fn payload(m: &OwnedMessage) -> Vec<u8> {
    m.payload().map(<[u8]>::to_vec).unwrap_or_default()
}

/// Polls `cond` until it holds or `timeout` passes.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}
