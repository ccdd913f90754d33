//! `__cluster/brokers/<id>.json`: each broker registers where it listens. One writer per file
//! (the broker itself), written atomically; the controller reads the directory to know which
//! brokers exist before they have dialled in.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::assignment::BrokerEndpoint;
use crate::atomic_file::{read_json, write_json};
use crate::fs::Fs;
use crate::layout::Layout;
use crate::names;
use crate::{Error, Result};

/// One broker's registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BrokerRegistration {
    pub broker_id: i32,
    /// The Kafka listener clients are told about.
    pub host: String,
    pub port: u16,
    /// `host:port` of the broker's heartbeat gRPC server.
    pub heartbeat: String,
    /// `host:port` of the broker's inter-broker Kafka listener, where the other brokers send
    /// what only brokers send (transaction markers and verification). `None`: a broker without
    /// one; the others call its Kafka listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interbroker: Option<String>,
    /// Changes with every process start, so a restart is told apart from a long silence.
    pub incarnation: Uuid,
}

impl BrokerRegistration {
    /// Where the broker listens, as an assignment publishes it.
    pub fn endpoint(&self) -> BrokerEndpoint {
        BrokerEndpoint { host: self.host.clone(), port: self.port, interbroker: self.interbroker.clone() }
    }
}

/// Writes this broker's registration (temp + fsync + rename; this broker is its only writer).
pub fn register(fs: &dyn Fs, layout: &Layout, registration: &BrokerRegistration) -> Result<()> {
    let dir = layout.brokers_dir();
    fs.create_dir_all(&dir).map_err(|e| Error::io("mkdir", &dir, e))?;
    write_json(fs, &dir.join(names::broker_file_name(registration.broker_id)?), registration)
}

/// Every registration on the volume. A file that is not a registration is an error.
pub fn list(fs: &dyn Fs, layout: &Layout) -> Result<Vec<BrokerRegistration>> {
    let dir = layout.brokers_dir();
    let entries = match fs.list_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", &dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        if names::parse_temp_file_name(&entry.name).is_ok() {
            continue; // a registration being written right now
        }
        names::parse_broker_file_name(&entry.name)?;
        if let Some(r) = read_json(fs, &dir.join(&entry.name), "broker registration")? {
            out.push(r);
        }
    }
    out.sort_by_key(|r: &BrokerRegistration| r.broker_id);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn register_and_list() -> Result<()> {
        let fs = MemFs::new();
        let layout = Layout::new("/data");
        assert!(list(&fs, &layout)?.is_empty());
        for id in [2, 0] {
            let r = BrokerRegistration { broker_id: id, host: "h".into(), port: 9092, heartbeat: "h:9094".into(), interbroker: None, incarnation: Uuid::new_v4() };
            register(&fs, &layout, &r)?;
        }
        let ids: Vec<i32> = list(&fs, &layout)?.iter().map(|r| r.broker_id).collect();
        assert_eq!(ids, vec![0, 2]);
        Ok(())
    }
}
